-- heartq schema v46 (SQLite): the queued jobs with a rate key indexed by queue and key,
-- then in claim order (priority, `run_at`, id), in place of the index by key alone (v22).
--
-- A rate limit counts a key's starts in every queue, but a claim takes jobs of its own
-- queues: through an index by key it found every rate key of every queue, and walked
-- each key's jobs past those of other queues to find one of its own. A queue with 50,000
-- rate-limited jobs made every other queue's claim read them (a claim and its finish:
-- 80 ms, 1.2 without them). Now a claim finds the rate keys of its own queues, one seek
-- each, and asks whether a rate-limited job waits in its own queues only. Runs once, in
-- the migration's BEGIN IMMEDIATE transaction with its version row.
DROP INDEX IF EXISTS heartq_jobs_rated_claim_idx;
CREATE INDEX heartq_jobs_rated_claim_idx
    ON heartq_jobs (queue, rate_key, priority DESC, run_at, id)
    WHERE status = 'queued' AND rate_key IS NOT NULL;
