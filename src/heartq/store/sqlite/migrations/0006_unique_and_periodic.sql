-- heartq schema v6 (SQLite): unique jobs and periodic schedules.
-- Runs once, in the migration's BEGIN IMMEDIATE transaction with its version row.
--
-- `unique_key`: while a job with a key is queued or running, an enqueue with the same key
-- returns that job instead of storing another (docs/design/policies.md, "Unique jobs"). SQLite has
-- one writer at a time, so the enqueue's look-then-insert is atomic; the partial unique
-- index below is the backstop that makes two live jobs with one key impossible whatever
-- path wrote them. Jobs without a key enter neither index.
-- `schedule`: the periodic schedule whose tick enqueued the job (NULL for the others).
ALTER TABLE heartq_jobs ADD COLUMN unique_key TEXT;
ALTER TABLE heartq_jobs ADD COLUMN schedule TEXT;
CREATE UNIQUE INDEX IF NOT EXISTS heartq_jobs_unique_live_idx ON heartq_jobs (unique_key)
    WHERE unique_key IS NOT NULL AND status IN ('queued', 'running');
-- `unique_for`: a job with the key that finished within the window also counts.
CREATE INDEX IF NOT EXISTS heartq_jobs_unique_key_idx ON heartq_jobs (unique_key, finished_at)
    WHERE unique_key IS NOT NULL;

-- One row per periodic schedule: the last tick the fleet enqueued and the next one.
CREATE TABLE IF NOT EXISTS heartq_schedules (
    name         TEXT PRIMARY KEY,
    task         TEXT NOT NULL,
    spec         TEXT NOT NULL,
    last_tick    REAL,
    next_tick    REAL,
    last_job_id  TEXT,
    updated_at   REAL NOT NULL,
    updated_by   TEXT
);
