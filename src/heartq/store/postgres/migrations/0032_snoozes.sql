-- heartq schema v32 (PostgreSQL): jobs that snooze.
-- A task that finds it is too early (an API answered 429 with Retry-After, a file is not
-- there yet) raises or returns heartq.Snooze(seconds): its job is queued again, runnable
-- after that delay, and the attempt is not counted against max_retries. Its execution
-- ends 'snoozed' (the CHECK below), and the job counts its snoozes (since it was enqueued
-- or replayed): the claim hands the count to the worker, and a snooze past its task's
-- max_snoozes is a failed attempt instead (docs/design/job-states.md). A constant
-- default: adding the column rewrites nothing, and no index names it.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS snoozes integer NOT NULL DEFAULT 0;

-- The wider check: NOT VALID, as in v5, since every existing row satisfies it (no scan).
ALTER TABLE ended_executions DROP CONSTRAINT IF EXISTS executions_outcome_check;
ALTER TABLE ended_executions ADD CONSTRAINT executions_outcome_check CHECK (outcome IS NULL OR outcome IN
    ('succeeded', 'failed', 'crashed', 'interrupted', 'timed_out', 'cancelled', 'released',
     'snoozed'))
    NOT VALID;
