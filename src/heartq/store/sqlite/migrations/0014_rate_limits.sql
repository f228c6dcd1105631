-- heartq schema v14 (SQLite): rate limits across the fleet.
-- See the PostgreSQL migration of the same number for what it is for.
-- Runs once, in the migration's BEGIN IMMEDIATE transaction with its version row.
--
-- `rate_key`, `rate_limit`, `rate_period`: at most `rate_limit` attempts of jobs with the
-- key start in any `rate_period` seconds, enforced by the claim, which counts the key's
-- executions (each records its job's key) started within the period. Queued jobs fall
-- in three claim indexes: neither key, a concurrency key only, a rate key (ordered by
-- key: a claim visits each key and walks its best jobs only).
ALTER TABLE heartq_jobs ADD COLUMN rate_key TEXT;
ALTER TABLE heartq_jobs ADD COLUMN rate_limit INTEGER;
ALTER TABLE heartq_jobs ADD COLUMN rate_period REAL;
ALTER TABLE heartq_executions ADD COLUMN rate_key TEXT;
ALTER TABLE heartq_tasks ADD COLUMN rate_limit TEXT;
ALTER TABLE heartq_tasks ADD COLUMN rate_key TEXT;
DROP INDEX IF EXISTS heartq_jobs_claim_idx;
CREATE INDEX heartq_jobs_claim_idx ON heartq_jobs (queue, priority DESC, run_at, id)
    WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL;
DROP INDEX IF EXISTS heartq_jobs_keyed_claim_idx;
CREATE INDEX heartq_jobs_keyed_claim_idx ON heartq_jobs (queue, priority DESC, run_at, id)
    WHERE status = 'queued' AND concurrency_key IS NOT NULL AND rate_key IS NULL;
CREATE INDEX IF NOT EXISTS heartq_jobs_rated_claim_idx
    ON heartq_jobs (rate_key, priority DESC, run_at, id)
    WHERE status = 'queued' AND rate_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS heartq_executions_rate_idx
    ON heartq_executions (rate_key, started_at) WHERE rate_key IS NOT NULL;
