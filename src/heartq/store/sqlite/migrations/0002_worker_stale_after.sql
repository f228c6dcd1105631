-- heartq schema v2 (SQLite): each worker records its own staleness threshold (seconds),
-- so a worker is judged stale by its own settings, never by the observer's. NULL (workers
-- of older versions): the observer's threshold applies.
-- Runs once, in the migration's BEGIN IMMEDIATE transaction with its version row.

ALTER TABLE heartq_workers ADD COLUMN stale_after REAL;
