-- heartq schema v4 (PostgreSQL): task declarations, what a job's caller chose, waiters.
--
-- `tasks`: each worker declares the tasks it runs (their queue and policy) at startup, so
-- an enqueue by name from a program without the task code, or from the command line,
-- takes the task's own options instead of the defaults.
CREATE TABLE IF NOT EXISTS tasks (
    name              text PRIMARY KEY,
    queue             text NOT NULL,
    priority          integer NOT NULL,
    max_retries       integer NOT NULL,
    retry_backoff     double precision NOT NULL,
    retry_backoff_max double precision NOT NULL,
    timeout           double precision,
    heartbeat_timeout double precision,
    declared_at       timestamptz NOT NULL,
    declared_by       text
);

-- `chosen`: which of queue (1), priority (2), max_retries (4) and the retry backoff (8)
-- the job's caller chose
-- explicitly; the others follow the task's declaration, and a job still waiting is
-- re-routed when the declaration changes. Jobs of older versions count as all chosen
-- (they keep what they were given). A constant default: no table rewrite.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS chosen integer NOT NULL DEFAULT 15;

-- `awaited`: someone waits for this job's end (`App.result`): its finish sends a NOTIFY.
-- Jobs nobody waits for cost nothing more to finish.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS awaited boolean NOT NULL DEFAULT false;
