-- heartq schema v37 (PostgreSQL): fair shares on the ready log (docs/design/limits.md,
-- "Fair shares"). A lane is now a queue, a priority and a fairness key ('' for the jobs
-- without one): a job with a key enters the ready log in its key's lane, and a claim
-- starts past each lane's own frontier, so a key's flood is never walked to reach the
-- next key's jobs, and what finished jobs leave behind under a held xmin horizon stays
-- behind each lane's frontier, as before. Each mark carries its lane's virtual time
-- (`served`: its slots so far, each divided by its weight) and its queue's clock as the
-- claim left it (`clock`), from which claims give their slots to the lanes in turn.
--
-- Workers of the version before keep working through it as long as no job with a key is
-- enqueued (their lanes are the keys' '' lanes); enqueue keyed jobs once every worker
-- runs this version. The ready index is rebuilt: writes to `jobs` wait for it (about a
-- second per 100,000 queued jobs here).
ALTER TABLE lanes ADD COLUMN IF NOT EXISTS fair_key text COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE lanes DROP CONSTRAINT IF EXISTS lanes_pkey;
ALTER TABLE lanes ADD PRIMARY KEY (queue, priority, fair_key);

ALTER TABLE claim_marks ADD COLUMN IF NOT EXISTS fair_key text COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE claim_marks ADD COLUMN IF NOT EXISTS served float8;
ALTER TABLE claim_marks ADD COLUMN IF NOT EXISTS clock float8;
DROP INDEX IF EXISTS claim_marks_lane_idx;
CREATE INDEX claim_marks_lane_idx
    ON claim_marks (queue, priority, fair_key, frontier_xid, frontier_id, made_at);

DROP INDEX IF EXISTS jobs_ready_idx;
CREATE INDEX jobs_ready_idx ON jobs (queue, priority, (coalesce(fair_key, '')), ready_xid, id)
    WHERE status = 'queued' AND ready_xid IS NOT NULL;
