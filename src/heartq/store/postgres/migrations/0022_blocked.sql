-- heartq schema v22 (PostgreSQL): jobs blocked by a dead dependency (docs/design/pipelines.md,
-- "Jobs that wait for jobs").
--
-- `blocked`: a job whose dependency ended dead (and that blocks on failure,
-- `on_dependency_failure` 'block', the default from this version), or that waits for a
-- blocked job, waits in this status until the dead job is replayed from the dead-letter
-- queue (then it is `waiting` again), or until it is cancelled. Like `waiting`, it is in
-- no claim index. The CHECK is replaced NOT VALID: every existing row satisfies the wider
-- one, so no table scan holds the upgrade. Jobs enqueued before keep the policy they were
-- enqueued with ('cancel' or 'run').
ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_status_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_status_check
    CHECK (status IN ('waiting', 'blocked', 'queued', 'running', 'succeeded', 'dead',
                      'cancelled'))
    NOT VALID;

-- `holders`: how many of the job's dependencies hold it (blocked while more than 0): each
-- an edge with `holds`. A constant default: a catalog-only change, no table rewrite.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS holders integer NOT NULL DEFAULT 0;

-- `holds`: this dependency holds the job: it ended dead (`ended` 'dead', the job blocks
-- on failure) or it is blocked itself (`ended` NULL). Set and cleared only by whoever
-- changes the dependency's status, under its row lock, in the same transaction; the
-- job's `holders` moves with each change, under the job's row lock.
ALTER TABLE job_dependencies ADD COLUMN IF NOT EXISTS holds boolean NOT NULL DEFAULT false;
