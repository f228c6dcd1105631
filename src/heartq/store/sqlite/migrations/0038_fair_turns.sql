-- heartq schema v38 (SQLite): fair shares taken in rotation (deficit round robin), as
-- PostgreSQL's claim takes them (docs/design/limits.md, "Fair shares"). Runs once, in
-- the migration's BEGIN IMMEDIATE transaction with its version row.

-- A tier (a queue and a priority) finds its keys in order from its cursor: one probe of
-- the fair claim index past the key before (a skip scan), each key's first runnable jobs
-- a walk of its range. So the index, v35's by queue and key, is now by queue, priority
-- and key (one index of the keyed jobs, not two to write at each enqueue and claim).
DROP INDEX heartq_jobs_fair_claim_idx;
CREATE INDEX heartq_jobs_fair_claim_idx
    ON heartq_jobs (queue, priority DESC, fair_key, run_at, id)
    WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
      AND fair_key IS NOT NULL;

-- Each tier's cursor: the lane that took last (`turn_key`, '' for the jobs without a
-- key) and how many jobs its turn still has (`remaining`). Rows no claim moved for an
-- hour are pruned (a tier without one starts from its first lane).
CREATE TABLE heartq_fair_turns (
    queue TEXT NOT NULL,
    priority INTEGER NOT NULL,
    turn_key TEXT NOT NULL,
    remaining INTEGER NOT NULL,
    turned_at REAL NOT NULL,
    PRIMARY KEY (queue, priority)
) WITHOUT ROWID;

-- The virtual times of v35's start-time fair queuing: no longer read.
DROP TABLE heartq_fair_shares;
DROP TABLE heartq_fair_clocks;
