-- heartq schema v36 (SQLite): a task's own expiry, in its declaration. See the
-- PostgreSQL migration of the same number for what it is for.
-- Runs once, in the migration's BEGIN IMMEDIATE transaction with its version row.
ALTER TABLE heartq_tasks ADD COLUMN expires REAL;
