-- heartq schema v33 (SQLite): a job not started by a time is dropped, not run late.
-- See the PostgreSQL migration of the same number for what it is for.
-- Runs once, in the migration's BEGIN IMMEDIATE transaction with its version row.
ALTER TABLE heartq_jobs ADD COLUMN expires_at REAL;
