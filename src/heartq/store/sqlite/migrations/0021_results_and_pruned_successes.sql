-- heartq schema v21 (SQLite): how a dependency's result reaches its dependent, and the
-- trace of succeeded jobs since pruned.
-- See the PostgreSQL migration of the same number for what each part is for.
-- Runs once, in the migration's BEGIN IMMEDIATE transaction with its version row.
ALTER TABLE heartq_job_dependencies ADD COLUMN result_as TEXT;

CREATE TABLE IF NOT EXISTS heartq_pruned_successes (
    id TEXT PRIMARY KEY
) WITHOUT ROWID;
