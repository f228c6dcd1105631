-- heartq schema v22 (SQLite): jobs blocked by a dead dependency.
-- See the PostgreSQL migration of the same number for what each part is for.
-- Runs once, in the migration's BEGIN IMMEDIATE transaction with its version row.
--
-- SQLite cannot alter a CHECK constraint: heartq_jobs is rebuilt with the status
-- 'blocked' allowed, every column of schema v21 copied by name, every index made again
-- (a table's indexes go with it when it is dropped) and the view that reads it
-- (heartq_executions, schema v17) dropped first and made again. The new column comes with
-- the rebuild.
DROP VIEW heartq_executions;
CREATE TABLE heartq_jobs_v22 (
    id                    TEXT PRIMARY KEY,
    task                  TEXT NOT NULL,
    queue                 TEXT NOT NULL,
    args                  TEXT NOT NULL,
    priority              INTEGER NOT NULL DEFAULT 0,
    status                TEXT NOT NULL
                          CHECK (status IN ('waiting', 'blocked', 'queued', 'running',
                                            'succeeded', 'dead', 'cancelled')),
    run_at                REAL NOT NULL,
    attempts              INTEGER NOT NULL DEFAULT 0,
    max_retries           INTEGER NOT NULL,
    retry_backoff         REAL NOT NULL,
    retry_backoff_max     REAL NOT NULL,
    worker_id             TEXT,
    execution_id          INTEGER NOT NULL DEFAULT 0,
    lease_expires_at      REAL,
    heartbeat_at          REAL,
    progress_value        REAL,
    progress_stage        TEXT,
    progress_message      TEXT,
    checkpoint            TEXT,
    result                TEXT,
    error                 TEXT,
    dead_reason           TEXT,
    cancel_requested      INTEGER NOT NULL DEFAULT 0,
    created_at            REAL NOT NULL,
    started_at            REAL,
    finished_at           REAL,
    updated_at            REAL NOT NULL,
    chosen                INTEGER NOT NULL DEFAULT 15,
    awaited               INTEGER NOT NULL DEFAULT 0,
    cancelled_by          TEXT,
    result_pending        INTEGER NOT NULL DEFAULT 0,
    unique_key            TEXT,
    schedule              TEXT,
    concurrency_key       TEXT,
    concurrency_limit     INTEGER,
    meta                  TEXT,
    has_dependents        INTEGER NOT NULL DEFAULT 0,
    waiting_for           INTEGER NOT NULL DEFAULT 0,
    on_dependency_failure TEXT,
    dependency_results    INTEGER NOT NULL DEFAULT 0,
    rate_key              TEXT,
    rate_limit            INTEGER,
    rate_period           REAL,
    claimed_ahead         INTEGER NOT NULL DEFAULT 0,
    holders               INTEGER NOT NULL DEFAULT 0
);
INSERT INTO heartq_jobs_v22 (
    id, task, queue, args, priority, status, run_at, attempts, max_retries, retry_backoff,
    retry_backoff_max, worker_id, execution_id, lease_expires_at, heartbeat_at,
    progress_value, progress_stage, progress_message, checkpoint, result, error, dead_reason,
    cancel_requested, created_at, started_at, finished_at, updated_at, chosen, awaited,
    cancelled_by, result_pending, unique_key, schedule, concurrency_key, concurrency_limit,
    meta, has_dependents, waiting_for, on_dependency_failure, dependency_results, rate_key,
    rate_limit, rate_period, claimed_ahead)
SELECT
    id, task, queue, args, priority, status, run_at, attempts, max_retries, retry_backoff,
    retry_backoff_max, worker_id, execution_id, lease_expires_at, heartbeat_at,
    progress_value, progress_stage, progress_message, checkpoint, result, error, dead_reason,
    cancel_requested, created_at, started_at, finished_at, updated_at, chosen, awaited,
    cancelled_by, result_pending, unique_key, schedule, concurrency_key, concurrency_limit,
    meta, has_dependents, waiting_for, on_dependency_failure, dependency_results, rate_key,
    rate_limit, rate_period, claimed_ahead
FROM heartq_jobs;
DROP TABLE heartq_jobs;
ALTER TABLE heartq_jobs_v22 RENAME TO heartq_jobs;

-- Every index of schema v21, as its migration made it (0006, 0007, 0013, 0014, 0016, 0017).
CREATE INDEX heartq_jobs_key_running_idx ON heartq_jobs (concurrency_key)
    WHERE status = 'running' AND concurrency_key IS NOT NULL;
CREATE INDEX heartq_jobs_lease_idx ON heartq_jobs (lease_expires_at) WHERE status = 'running';
CREATE INDEX heartq_jobs_worker_idx ON heartq_jobs (worker_id) WHERE status = 'running';
CREATE INDEX heartq_jobs_finished_idx
    ON heartq_jobs (status, finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX heartq_jobs_dead_idx ON heartq_jobs (queue, created_at) WHERE status = 'dead';
CREATE UNIQUE INDEX heartq_jobs_unique_live_idx ON heartq_jobs (unique_key)
    WHERE unique_key IS NOT NULL AND status IN ('queued', 'running');
CREATE INDEX heartq_jobs_unique_key_idx ON heartq_jobs (unique_key, finished_at)
    WHERE unique_key IS NOT NULL;
CREATE INDEX heartq_jobs_waiting_idx ON heartq_jobs (queue) WHERE status = 'waiting';
CREATE INDEX heartq_jobs_claim_idx ON heartq_jobs (queue, priority DESC, run_at, id)
    WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL;
CREATE INDEX heartq_jobs_keyed_claim_idx ON heartq_jobs (queue, priority DESC, run_at, id)
    WHERE status = 'queued' AND concurrency_key IS NOT NULL AND rate_key IS NULL;
CREATE INDEX heartq_jobs_rated_claim_idx
    ON heartq_jobs (rate_key, priority DESC, run_at, id)
    WHERE status = 'queued' AND rate_key IS NOT NULL;
CREATE INDEX heartq_jobs_pending_result_idx ON heartq_jobs (lease_expires_at)
    WHERE result_pending;
CREATE INDEX heartq_jobs_running_rate_idx ON heartq_jobs (rate_key, started_at)
    WHERE status = 'running' AND rate_key IS NOT NULL;

CREATE VIEW heartq_executions AS
SELECT job_id, execution_id, worker_id, started_at, ended_at, outcome, error, crash, rate_key
FROM heartq_ended_executions
UNION ALL
SELECT id, execution_id, worker_id, started_at, NULL, NULL, NULL, NULL, rate_key
FROM heartq_jobs WHERE status = 'running';

ALTER TABLE heartq_job_dependencies ADD COLUMN holds INTEGER NOT NULL DEFAULT 0;
