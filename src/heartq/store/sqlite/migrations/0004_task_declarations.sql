-- heartq schema v4 (SQLite): task declarations, what a job's caller chose, waiters.
-- See the PostgreSQL migration of the same number for what each part is for.
-- Runs once, in the migration's BEGIN IMMEDIATE transaction with its version row.

CREATE TABLE IF NOT EXISTS heartq_tasks (
    name              TEXT PRIMARY KEY,
    queue             TEXT NOT NULL,
    priority          INTEGER NOT NULL,
    max_retries       INTEGER NOT NULL,
    retry_backoff     REAL NOT NULL,
    retry_backoff_max REAL NOT NULL,
    timeout           REAL,
    heartbeat_timeout REAL,
    declared_at       REAL NOT NULL,
    declared_by       TEXT
);

ALTER TABLE heartq_jobs ADD COLUMN chosen INTEGER NOT NULL DEFAULT 15;
ALTER TABLE heartq_jobs ADD COLUMN awaited INTEGER NOT NULL DEFAULT 0;
