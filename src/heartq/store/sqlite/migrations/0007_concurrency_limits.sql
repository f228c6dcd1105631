-- heartq schema v7 (SQLite): per-key concurrency limits.
-- Runs once, in the migration's BEGIN IMMEDIATE transaction with its version row.
--
-- `concurrency_key`, `concurrency_limit`: at most `concurrency_limit` jobs with the same
-- key run at once (docs/design/limits.md, "Concurrency limits"), enforced by the claim. Jobs
-- without a key (NULL) are claimed as before, by the claim index, which now holds only
-- them: a backlog of keyed jobs whose keys are busy is never walked by the plain claim.
-- Keyed jobs have an index of their own, and running keyed jobs one to count them by key.
ALTER TABLE heartq_jobs ADD COLUMN concurrency_key TEXT;
ALTER TABLE heartq_jobs ADD COLUMN concurrency_limit INTEGER;
DROP INDEX IF EXISTS heartq_jobs_claim_idx;
CREATE INDEX heartq_jobs_claim_idx ON heartq_jobs (queue, priority DESC, run_at, id)
    WHERE status = 'queued' AND concurrency_key IS NULL;
CREATE INDEX IF NOT EXISTS heartq_jobs_keyed_claim_idx
    ON heartq_jobs (queue, priority DESC, run_at, id)
    WHERE status = 'queued' AND concurrency_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS heartq_jobs_key_running_idx ON heartq_jobs (concurrency_key)
    WHERE status = 'running' AND concurrency_key IS NOT NULL;
