-- heartq schema v11 (SQLite): a job's metadata.
-- See the PostgreSQL migration of the same number for what it is for.
-- Runs once, in the migration's BEGIN IMMEDIATE transaction with its version row.
ALTER TABLE heartq_jobs ADD COLUMN meta TEXT;
