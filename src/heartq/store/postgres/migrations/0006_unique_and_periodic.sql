-- heartq schema v6 (PostgreSQL): unique jobs and periodic schedules.
--
-- `unique_key`: while a job with a key is queued or running, an enqueue with the same key
-- returns that job instead of storing another (docs/design/policies.md, "Unique jobs"). The
-- enqueue serializes on a transaction advisory lock of the key, then looks, then
-- inserts; the partial unique index below is the backstop that makes two live jobs with
-- one key impossible whatever path wrote them. Jobs without a key enter neither index.
-- `schedule`: the periodic schedule whose tick enqueued the job (NULL for the others).
-- Nullable, no default: catalog-only changes.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS unique_key text;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS schedule text;
CREATE UNIQUE INDEX IF NOT EXISTS jobs_unique_live_idx ON jobs (unique_key)
    WHERE unique_key IS NOT NULL AND status IN ('queued', 'running');
-- `unique_for`: a job with the key that finished within the window also counts.
CREATE INDEX IF NOT EXISTS jobs_unique_key_idx ON jobs (unique_key, finished_at)
    WHERE unique_key IS NOT NULL;

-- `schedules`: one row per periodic schedule, locked by whichever worker enqueues its due
-- ticks (`FOR UPDATE`), so the fleet agrees on the last tick enqueued; each tick's job
-- also carries the unique key `periodic:<name>@<tick>`, so a tick is one job even if two
-- writers disagreed about the row.
CREATE TABLE IF NOT EXISTS schedules (
    name         text PRIMARY KEY,
    task         text NOT NULL,
    spec         text NOT NULL,
    last_tick    timestamptz,
    next_tick    timestamptz,
    last_job_id  text,
    updated_at   timestamptz NOT NULL,
    updated_by   text
);
