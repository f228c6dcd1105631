-- heartq schema v45 (SQLite): the queued jobs with a concurrency key indexed by queue
-- and key, then in claim order (priority, `run_at`, id), in place of the index in claim
-- order alone (v22).
--
-- The claim of such jobs ranked every runnable job with a key in its queues (50,000
-- queued over 1,000 keys: 130 ms a claim). It now finds a queue's keys one seek each,
-- reads each key's best job, and then the first jobs of the keys with room whose turn
-- it is: its cost follows the keys, not their backlogs, as the rate-limited claim's
-- does (`heartq_jobs_rated_claim_idx`). Runs once, in the migration's BEGIN IMMEDIATE
-- transaction with its version row.
DROP INDEX IF EXISTS heartq_jobs_keyed_claim_idx;
CREATE INDEX heartq_jobs_keyed_claim_idx
    ON heartq_jobs (queue, concurrency_key, priority DESC, run_at, id)
    WHERE status = 'queued' AND concurrency_key IS NOT NULL AND rate_key IS NULL;
