-- heartq schema v46 (PostgreSQL): the queued jobs with a rate key indexed by queue and
-- key, then in claim order (priority, `run_at`, id), in place of the index by key alone
-- (v14).
--
-- A rate limit counts a key's starts in every queue, but a claim takes jobs of its own
-- queues: through an index by key it found every rate key of every queue, and walked
-- each key's jobs past those of other queues to find one of its own. A queue with 50,000
-- rate-limited jobs made every other queue's claim read them (a claim and its finish:
-- 23-61 ms, 3.4 without them). Now a claim finds the rate keys of its own queues, one
-- probe each, as the claim of jobs with a concurrency key does since v45, and asks
-- whether a rate-limited job waits in its own queues only.
--
-- The index is built in the migration's transaction, as every index here: writes to
-- job_documents wait while it is built (docs/UPGRADING.md, "Schema v46").
DROP INDEX IF EXISTS jobs_rated_claim_idx;
CREATE INDEX jobs_rated_claim_idx ON job_documents (queue, rate_key, priority DESC, run_at, id)
    WHERE status = 'queued' AND rate_key IS NOT NULL;
