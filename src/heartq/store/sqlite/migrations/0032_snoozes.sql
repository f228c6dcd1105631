-- heartq schema v32 (SQLite): jobs that snooze.
-- See the PostgreSQL migration of the same number for what it is for.
-- Runs once, in the migration's BEGIN IMMEDIATE transaction with its version row.
--
-- SQLite cannot alter a CHECK constraint: heartq_ended_executions is rebuilt with the
-- outcome 'snoozed' allowed, every column of schema v30 copied by name, its index made
-- again (a table's indexes go with it when it is dropped) and the view that reads it
-- (heartq_executions, schema v24) dropped first and made again. A file with many ended
-- attempts takes a while to migrate: each row is copied once (docs/UPGRADING.md).
ALTER TABLE heartq_jobs ADD COLUMN snoozes INTEGER NOT NULL DEFAULT 0;

DROP VIEW heartq_executions;
CREATE TABLE heartq_ended_executions_v31 (
    job_id       TEXT NOT NULL,
    execution_id INTEGER NOT NULL,
    worker_id    TEXT,
    started_at   REAL NOT NULL,
    ended_at     REAL,
    outcome      TEXT CHECK (outcome IS NULL OR outcome IN
                 ('succeeded', 'failed', 'crashed', 'interrupted', 'timed_out', 'cancelled',
                  'released', 'snoozed')),
    error        TEXT,
    crash        TEXT,
    rate_key     TEXT,
    PRIMARY KEY (job_id, execution_id)
) WITHOUT ROWID;
INSERT INTO heartq_ended_executions_v31 (job_id, execution_id, worker_id, started_at,
                                         ended_at, outcome, error, crash, rate_key)
SELECT job_id, execution_id, worker_id, started_at, ended_at, outcome, error, crash, rate_key
FROM heartq_ended_executions;
DROP TABLE heartq_ended_executions;
ALTER TABLE heartq_ended_executions_v31 RENAME TO heartq_ended_executions;
CREATE INDEX heartq_executions_rate_idx
    ON heartq_ended_executions (rate_key, started_at) WHERE rate_key IS NOT NULL;

CREATE VIEW heartq_executions AS
SELECT job_id, execution_id, worker_id, started_at, ended_at, outcome, error, crash, rate_key
FROM heartq_ended_executions
UNION ALL
SELECT id, execution_id, worker_id, started_at, NULL, NULL, NULL, NULL, rate_key
FROM heartq_jobs WHERE status = 'running'
UNION ALL
SELECT j.id, j.execution_id, j.worker_id, j.started_at, j.finished_at, 'succeeded', NULL, NULL,
       j.rate_key
FROM heartq_jobs AS j
WHERE j.status = 'succeeded' AND NOT EXISTS (
    SELECT 1 FROM heartq_ended_executions AS e
    WHERE e.job_id = j.id AND e.execution_id = j.execution_id);
