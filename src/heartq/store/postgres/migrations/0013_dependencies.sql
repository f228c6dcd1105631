-- heartq schema v13 (PostgreSQL): jobs that wait for jobs (docs/design/pipelines.md, "Jobs that
-- wait for jobs").
--
-- `waiting`: a job enqueued with `depends_on` waits in this status until every
-- dependency has succeeded; then it is `queued` (its run_at: now, or its own later eta).
-- It is in no claim index (they are partial on 'queued'): a waiting job costs a claim
-- nothing. The CHECK is replaced NOT VALID: every existing row satisfies the wider one,
-- so no table scan holds the upgrade.
ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_status_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_status_check
    CHECK (status IN ('waiting', 'queued', 'running', 'succeeded', 'dead', 'cancelled'))
    NOT VALID;

-- `has_dependents`: some job depends on this one. Set by the enqueue of a dependent, with
-- an UPDATE that takes the row's lock (so it waits for, or is waited for by, the
-- statement that ends the job); the worker's one-statement finish leaves such a job to a
-- transaction that also releases its dependents. Jobs without dependents pay nothing.
-- `waiting_for`: the dependencies that have not ended yet (0 for every other job).
-- `on_dependency_failure`: 'cancel' (a dependency that ends dead or cancelled cancels
-- the job) or 'run' (it counts as satisfied); NULL for jobs without dependencies.
-- `dependency_results`: the job's task receives its dependencies' results, in order, as
-- its first argument (a group's callback); the worker reads them only for such jobs.
-- Columns with a constant default: catalog-only changes, no table rewrite; one ALTER for
-- the four (one pass over the catalog: a quarter of the time of four).
ALTER TABLE jobs
    ADD COLUMN IF NOT EXISTS has_dependents boolean NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS waiting_for integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS on_dependency_failure text,
    ADD COLUMN IF NOT EXISTS dependency_results boolean NOT NULL DEFAULT false;

-- One row per edge: `job_id` waits for `depends_on`. `position`: the dependency's place
-- in the job's `depends_on` (the order a callback receives results in). `ended`: how the
-- dependency ended as the release saw it (NULL: not yet): each edge is counted once,
-- even for a dependency replayed from the dead-letter queue and ended again.
-- The release reads a dependency's edges by `depends_on`; `get_job` a job's by its key.
CREATE TABLE IF NOT EXISTS job_dependencies (
    job_id     text NOT NULL,
    depends_on text NOT NULL,
    position   integer NOT NULL,
    ended      text,
    PRIMARY KEY (job_id, depends_on)
);
CREATE INDEX IF NOT EXISTS job_dependencies_depends_on_idx ON job_dependencies (depends_on);

-- Waiting jobs by queue (`heartq.testing`'s drain asks whether any waits for work still
-- to come; `heartq stats` counts them): only jobs with dependencies enter it, and leave it
-- at their release.
CREATE INDEX IF NOT EXISTS jobs_waiting_idx ON jobs (queue) WHERE status = 'waiting';
