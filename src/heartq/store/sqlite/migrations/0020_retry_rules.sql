-- heartq schema v20 (SQLite): each task's retry rules, declared with it.
-- See the PostgreSQL migration of the same number for what it is for.
-- Runs once, in the migration's BEGIN IMMEDIATE transaction with its version row.
ALTER TABLE heartq_tasks ADD COLUMN retry_rules TEXT;
