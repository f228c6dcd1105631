-- heartq schema v31 (SQLite): periodic schedules added, changed, paused and removed while
-- workers run. See the PostgreSQL migration of the same number for what it is for.
-- Runs once, in the migration's BEGIN IMMEDIATE transaction with its version row.
ALTER TABLE heartq_schedules ADD COLUMN definition TEXT;
ALTER TABLE heartq_schedules ADD COLUMN paused INTEGER NOT NULL DEFAULT 0;
ALTER TABLE heartq_schedules ADD COLUMN changed_at REAL;
ALTER TABLE heartq_schedules ADD COLUMN changed_by TEXT;
