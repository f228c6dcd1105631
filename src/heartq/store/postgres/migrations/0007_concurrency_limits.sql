-- heartq schema v7 (PostgreSQL): per-key concurrency limits.
--
-- `concurrency_key`, `concurrency_limit`: at most `concurrency_limit` jobs with the same
-- key run at once (docs/design/limits.md, "Concurrency limits"), enforced by the claim. Nullable,
-- no default: catalog-only changes. Jobs without a key (NULL) are claimed as before, by
-- the claim index, which now holds only them: a backlog of keyed jobs whose keys are
-- busy is never walked by the plain claim. Keyed jobs have an index of their own, and
-- running keyed jobs one to count them by key.
-- The claim index is rebuilt in this transaction: writes to `jobs` wait for the build
-- (a queue with a large backlog: plan the upgrade for a quiet moment).
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS concurrency_key text;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS concurrency_limit integer;
DROP INDEX IF EXISTS jobs_claim_idx;
CREATE INDEX jobs_claim_idx ON jobs (queue, priority DESC, run_at, id)
    WHERE status = 'queued' AND concurrency_key IS NULL;
CREATE INDEX IF NOT EXISTS jobs_keyed_claim_idx ON jobs (queue, priority DESC, run_at, id)
    WHERE status = 'queued' AND concurrency_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_key_running_idx ON jobs (concurrency_key)
    WHERE status = 'running' AND concurrency_key IS NOT NULL;
