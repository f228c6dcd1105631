-- heartq schema v3 (SQLite): fewer index writes per job.
-- heartq_jobs_status_idx (status, queue, created_at) took a write at every change of a
-- job's status (enqueue, claim, finish) and served only listings; listing dead jobs,
-- what operators do, keeps an index of its own that only dead jobs enter.
-- Runs once, in the migration's BEGIN IMMEDIATE transaction with its version row.

DROP INDEX IF EXISTS heartq_jobs_status_idx;
CREATE INDEX IF NOT EXISTS heartq_jobs_dead_idx
    ON heartq_jobs (queue, created_at) WHERE status = 'dead';
