-- heartq schema v18 (SQLite): jobs claimed ahead (a worker's prefetch buffer).
-- See the PostgreSQL migration of the same number for what it is for.
-- Runs once, in the migration's BEGIN IMMEDIATE transaction with its version row.
ALTER TABLE heartq_jobs ADD COLUMN claimed_ahead INTEGER NOT NULL DEFAULT 0;
