-- heartq schema v30 (SQLite): queues an operator controls while workers run.
-- See the PostgreSQL migration of the same number for what it is for.
-- Runs once, in the migration's BEGIN IMMEDIATE transaction with its version row.
CREATE TABLE IF NOT EXISTS heartq_queue_controls (
    queue TEXT PRIMARY KEY,
    paused INTEGER NOT NULL DEFAULT 0,
    concurrency INTEGER CHECK (concurrency IS NULL OR concurrency >= 0),
    changed_at REAL NOT NULL,
    changed_by TEXT NOT NULL
);
