-- heartq schema v29 (SQLite): a result that was lost says so.
-- See the PostgreSQL migration of the same number for what it is for.
-- Runs once, in the migration's BEGIN IMMEDIATE transaction with its version row.
ALTER TABLE heartq_jobs ADD COLUMN result_lost TEXT;
