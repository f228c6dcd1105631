-- heartq schema v34 (SQLite): a task that keys its jobs by their arguments says so in its
-- declaration. See the PostgreSQL migration of the same number for what it is for.
-- Runs once, in the migration's BEGIN IMMEDIATE transaction with its version row.
ALTER TABLE heartq_tasks ADD COLUMN uniqueness TEXT;
