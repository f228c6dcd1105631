-- heartq schema v14 (PostgreSQL): rate limits across the fleet.
--
-- `rate_key`, `rate_limit`, `rate_period`: at most `rate_limit` attempts of jobs with the
-- same key start in any `rate_period` seconds (docs/design/limits.md, "Rate limits"), enforced by
-- the claim. Nullable, no default: catalog-only changes. The starts are the executions
-- themselves: each execution of a limited job records its key, and the claim counts a
-- key's executions started within the period through `executions_rate_idx`, which only
-- they enter (closing an execution changes no column of it: still a HOT update).
-- `tasks.rate_limit` (a spec such as `100/m`) and `tasks.rate_key` (a template of the
-- job's arguments): what a worker declares, so an enqueue by name takes the task's limit.
--
-- Queued jobs fall in three claim indexes: neither key (the plain claim), a concurrency
-- key only (the keyed claim), a rate key (the rate-limited claim, which counts both
-- keys). The rate-limited one is ordered by key first: a claim visits each key (a skip
-- scan) and walks its best jobs only, so its cost follows the number of keys, not the
-- backlog behind them. The plain and keyed indexes are rebuilt in this transaction:
-- writes to `jobs` wait for the builds (a queue with a large backlog: plan the upgrade
-- for a quiet moment).
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS rate_key text;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS rate_limit integer;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS rate_period double precision;
ALTER TABLE executions ADD COLUMN IF NOT EXISTS rate_key text;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS rate_limit text;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS rate_key text;
DROP INDEX IF EXISTS jobs_claim_idx;
CREATE INDEX jobs_claim_idx ON jobs (queue, priority DESC, run_at, id)
    WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL;
DROP INDEX IF EXISTS jobs_keyed_claim_idx;
CREATE INDEX jobs_keyed_claim_idx ON jobs (queue, priority DESC, run_at, id)
    WHERE status = 'queued' AND concurrency_key IS NOT NULL AND rate_key IS NULL;
CREATE INDEX IF NOT EXISTS jobs_rated_claim_idx ON jobs (rate_key, priority DESC, run_at, id)
    WHERE status = 'queued' AND rate_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS executions_rate_idx ON executions (rate_key, started_at)
    WHERE rate_key IS NOT NULL;
