-- heartq schema v43 (SQLite): fair shares by start tags (start-time fair queuing;
-- docs/design/limits.md, "Fair shares"). A job that takes turns is given its place in
-- line, its tag, when it becomes runnable, so a claim reads one index in the order of
-- the turns: its jobs lie together there, whatever the keys. Runs once, in the
-- migration's BEGIN IMMEDIATE transaction with its version row.

-- A runnable job's start tag in its tier (a queue and a priority): NULL until it is
-- given one (by its enqueue, or by the claim that finds it due), and again once claimed.
-- Jobs queued to run later than the migration are tagged by the claim that finds them due.
ALTER TABLE heartq_jobs ADD COLUMN fair_tag REAL;

-- The jobs already queued that take turns and are due take their places in line as if
-- queued now into empty tiers: each key's jobs from 0, in their order, a step of one over
-- the weight each (a flood of one key and the few jobs of another interleave at once).
-- Done before the indexes are made, so that each is built once.
DROP INDEX heartq_jobs_fair_claim_idx;
UPDATE heartq_jobs SET fair_tag = t.tag
FROM (
    SELECT rowid AS r,
           coalesce(sum(1.0 / coalesce(fair_weight, 1.0)) OVER (
               PARTITION BY queue, priority, fair_key ORDER BY run_at, id
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0.0) AS tag
    FROM heartq_jobs
    WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
      AND fair_key IS NOT NULL AND run_at <= (julianday('now') - 2440587.5) * 86400.0
) AS t
WHERE heartq_jobs.rowid = t.r;

-- The tagged jobs in the order of their turns (v38's index by key is gone: a claim's
-- jobs were spread over every key's range of it, and so were the claim's writes).
-- `run_at` rides along for the queues' waits (index-only).
CREATE INDEX heartq_jobs_fair_claim_idx
    ON heartq_jobs (queue, priority DESC, fair_tag, id, run_at)
    WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
      AND fair_key IS NOT NULL AND fair_tag IS NOT NULL;

-- The jobs that take turns and have no tag yet: delayed, retried, snoozed, released,
-- reclaimed, replayed, re-routed or released by their dependencies. A claim tags those
-- due, oldest first.
CREATE INDEX heartq_jobs_fair_due_idx
    ON heartq_jobs (queue, run_at, id)
    WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
      AND fair_key IS NOT NULL AND fair_tag IS NULL;

-- Each tier's clock: the tag of the last job a claim took there. A job tagged while its
-- key has no work starts at it, so idle time earns no credit.
CREATE TABLE heartq_fair_clocks (
    queue TEXT NOT NULL,
    priority INTEGER NOT NULL,
    clock REAL NOT NULL,
    PRIMARY KEY (queue, priority)
) WITHOUT ROWID;

-- Each key's finish in its tier (its last tag plus one over its weight: its next job
-- starts there, unless the clock has passed it), how many of its jobs are in line,
-- tagged (`waiting`), and where its claimed jobs end (`served`: its last claimed tag
-- plus its step). When its line empties, claimed or cancelled, its finish is pulled back
-- to `served`: a key owes turns for the jobs it ran, not for those it cancelled.
-- `fair_key` '' is the jobs without a key, tagged at the claim from their finish. A row
-- that says nothing any more is pruned.
CREATE TABLE heartq_fair_finishes (
    queue TEXT NOT NULL,
    priority INTEGER NOT NULL,
    fair_key TEXT NOT NULL,
    finish REAL NOT NULL,
    waiting INTEGER NOT NULL,
    served REAL NOT NULL,
    PRIMARY KEY (queue, priority, fair_key)
) WITHOUT ROWID;

INSERT INTO heartq_fair_finishes (queue, priority, fair_key, finish, waiting, served)
SELECT queue, priority, fair_key, max(fair_tag + 1.0 / coalesce(fair_weight, 1.0)), count(*),
       0.0
FROM heartq_jobs INDEXED BY heartq_jobs_fair_claim_idx
WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
  AND fair_key IS NOT NULL AND fair_tag IS NOT NULL
GROUP BY queue, priority, fair_key;

-- v38's cursors of the rotation: no longer read.
DROP TABLE heartq_fair_turns;
