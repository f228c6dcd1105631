-- heartq schema v26 (PostgreSQL): the ready log, claimed from a stored frontier
-- (docs/design/claim.md, "The claim"; docs/design-notes/hot-path.md, "The ready log on
-- today's jobs table").
--
-- Under a held xmin horizon, each job claimed left the entry of its queued version at
-- the front of `jobs_claim_idx`, and every later claim walked all of them from the
-- index's start (issue 43's death spiral: 24 ms pickups became 11 s at 500 jobs/s). A
-- job enqueued runnable now, without a concurrency or a rate key, now carries the id of
-- the transaction that enqueued it (`ready_xid`); `jobs_ready_idx` orders those jobs by
-- it within their lane (queue, priority), and a claim starts past its lane's frontier:
-- the furthest of the marks claims append to `claim_marks`, each saying "every entry
-- before me is consumed, but those of the transactions I list as pending". The claim
-- clears `ready_xid`: a job that comes back (a retry, a reclaim, a release) or is
-- delayed, released by its dependencies or replayed keeps today's order by `run_at`
-- through `jobs_claim_idx`, which now holds only those.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS ready_xid xid8;

CREATE INDEX IF NOT EXISTS jobs_ready_idx ON jobs (queue, priority, ready_xid, id)
    WHERE status = 'queued' AND ready_xid IS NOT NULL;

DROP INDEX IF EXISTS jobs_claim_idx;
CREATE INDEX jobs_claim_idx ON jobs (queue, priority DESC, run_at, id)
    WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
      AND ready_xid IS NULL;

-- A lane per (queue, priority) that ever had a job enqueued into the ready log: made by
-- that enqueue, never updated (a claim reads its queues' lanes, then each one's frontier).
CREATE TABLE IF NOT EXISTS lanes (
    queue text NOT NULL,
    priority integer NOT NULL,
    PRIMARY KEY (queue, priority)
);

-- Appended by a claim that took from its lane (or, at most once a second, moved its
-- frontier or changed its pending list), never updated: a claim reads the furthest mark
-- of a lane backwards from the index's end, where the newest marks are, so the marks
-- dead under a held horizon are never in its way. `pending` lists the transactions that
-- were running below the frontier, `pending_after` the id of the last entry of each
-- taken so far. The pruner deletes marks a minute old that a further one supersedes.
CREATE TABLE IF NOT EXISTS claim_marks (
    queue text NOT NULL,
    priority integer NOT NULL,
    frontier_xid xid8 NOT NULL,
    frontier_id text COLLATE "C" NOT NULL,
    pending xid8[] NOT NULL,
    pending_after text[] COLLATE "C" NOT NULL,
    made_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS claim_marks_lane_idx
    ON claim_marks (queue, priority, frontier_xid, frontier_id, made_at);
