-- heartq schema v35 (SQLite): fair shares. A job may carry a fairness key (`fair_key`,
-- with its `fair_weight`): among a queue's runnable jobs of one priority, a claim takes
-- keys in turn, in proportion to their weights, and jobs without a key form one share
-- (docs/design/limits.md, "Fair shares"). Runs once, in the migration's BEGIN IMMEDIATE
-- transaction with its version row.
ALTER TABLE heartq_jobs ADD COLUMN fair_key TEXT;
ALTER TABLE heartq_jobs ADD COLUMN fair_weight REAL;

-- The claim index holds the one share of jobs without a key; the keyed jobs have their
-- own, ordered by key so that a claim finds each key's first jobs with one probe each.
DROP INDEX IF EXISTS heartq_jobs_claim_idx;
CREATE INDEX heartq_jobs_claim_idx ON heartq_jobs (queue, priority DESC, run_at, id)
    WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
      AND fair_key IS NULL;
CREATE INDEX heartq_jobs_fair_claim_idx
    ON heartq_jobs (queue, fair_key, priority DESC, run_at, id)
    WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
      AND fair_key IS NOT NULL;

-- Each share's virtual time: the slots it was served, each divided by its weight, since
-- it first had work (`heartq.store.sql.fair`). A share that comes back after a pause
-- starts at the least of the waiting shares' times, so idle time earns no credit. The
-- share of jobs without a key is `fair_key` ''. Rows no claim served for an hour are
-- pruned.
CREATE TABLE heartq_fair_shares (
    queue TEXT NOT NULL,
    fair_key TEXT NOT NULL,
    served REAL NOT NULL,
    served_at REAL NOT NULL,
    PRIMARY KEY (queue, fair_key)
) WITHOUT ROWID;

-- Each queue's clock: the least virtual time of its shares that had work at its last
-- claim. A share that comes back starts there.
CREATE TABLE heartq_fair_clocks (
    queue TEXT PRIMARY KEY,
    clock REAL NOT NULL
) WITHOUT ROWID;
