-- heartq schema v45 (PostgreSQL): the queued jobs with a concurrency key indexed by
-- queue and key, then in claim order (priority, `run_at`, id), in place of the index in
-- claim order alone (v14).
--
-- The claim of such jobs looked for the keys with room by reading every runnable job
-- with a key in its queues (50,000 queued over 1,000 keys: 150 ms a claim), then ranked
-- every queued job of the keys it locked. It now finds a queue's keys one probe each
-- (a skip scan of this index) and reads each key's best job, and then, for the keys it
-- locked, each one's first jobs: its cost follows the keys, not their backlogs, as the
-- rate-limited claim's does (`jobs_rated_claim_idx`). The first entry of a queue, which
-- the look whether a keyed job waits reads, is still its first entry here.
--
-- The index is built in the migration's transaction, as every index here: writes to
-- job_documents wait while it is built (docs/UPGRADING.md, "Schema v45").
DROP INDEX IF EXISTS jobs_keyed_claim_idx;
CREATE INDEX jobs_keyed_claim_idx ON job_documents (queue, concurrency_key, priority DESC, run_at, id)
    WHERE status = 'queued' AND concurrency_key IS NOT NULL AND rate_key IS NULL;
