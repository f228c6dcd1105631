-- heartq schema v1 (SQLite). Times are REAL seconds since the epoch, from the database clock.

CREATE TABLE heartq_jobs (
    id                TEXT PRIMARY KEY,
    task              TEXT NOT NULL,
    queue             TEXT NOT NULL,
    args              TEXT NOT NULL,
    priority          INTEGER NOT NULL DEFAULT 0,
    status            TEXT NOT NULL
                      CHECK (status IN ('queued', 'running', 'succeeded', 'dead', 'cancelled')),
    run_at            REAL NOT NULL,
    attempts          INTEGER NOT NULL DEFAULT 0,
    max_retries       INTEGER NOT NULL,
    retry_backoff     REAL NOT NULL,
    retry_backoff_max REAL NOT NULL,
    worker_id         TEXT,
    execution_id      INTEGER NOT NULL DEFAULT 0,
    lease_expires_at  REAL,
    heartbeat_at      REAL,
    progress_value    REAL,
    progress_stage    TEXT,
    progress_message  TEXT,
    checkpoint        TEXT,
    result            TEXT,
    error             TEXT,
    dead_reason       TEXT,
    cancel_requested  INTEGER NOT NULL DEFAULT 0,
    created_at        REAL NOT NULL,
    started_at        REAL,
    finished_at       REAL,
    updated_at        REAL NOT NULL
);

-- Claim scans exactly this: queued jobs of a queue, best priority first, then oldest.
CREATE INDEX heartq_jobs_claim_idx
    ON heartq_jobs (queue, priority DESC, run_at, id) WHERE status = 'queued';
-- Reap scans exactly this: running jobs by lease expiry.
CREATE INDEX heartq_jobs_lease_idx
    ON heartq_jobs (lease_expires_at) WHERE status = 'running';
-- Reclaiming a dead worker's jobs.
CREATE INDEX heartq_jobs_worker_idx
    ON heartq_jobs (worker_id) WHERE status = 'running';
-- Operator lists and counts, and pruning of finished jobs.
CREATE INDEX heartq_jobs_status_idx ON heartq_jobs (status, queue, created_at);
CREATE INDEX heartq_jobs_finished_idx
    ON heartq_jobs (status, finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE heartq_executions (
    job_id       TEXT NOT NULL,
    execution_id INTEGER NOT NULL,
    worker_id    TEXT,
    started_at   REAL NOT NULL,
    ended_at     REAL,
    outcome      TEXT CHECK (outcome IS NULL OR outcome IN
                 ('succeeded', 'failed', 'crashed', 'timed_out', 'cancelled', 'released')),
    error        TEXT,
    crash        TEXT,
    PRIMARY KEY (job_id, execution_id)
) WITHOUT ROWID;

CREATE TABLE heartq_workers (
    id                TEXT PRIMARY KEY,
    name              TEXT,
    hostname          TEXT NOT NULL,
    pid               INTEGER NOT NULL,
    queues            TEXT NOT NULL,
    concurrency       INTEGER NOT NULL,
    status            TEXT NOT NULL CHECK (status IN ('active', 'stopped', 'inactive')),
    started_at        REAL NOT NULL,
    last_heartbeat_at REAL NOT NULL,
    stopped_at        REAL
);

CREATE INDEX heartq_workers_status_idx ON heartq_workers (status, last_heartbeat_at);
CREATE INDEX heartq_workers_name_idx ON heartq_workers (name) WHERE name IS NOT NULL;
