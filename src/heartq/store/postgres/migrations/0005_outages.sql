-- heartq schema v5 (PostgreSQL), outages. When each worker's current unbroken run of heartbeats
-- began. A worker whose own heartbeats paused for over half its staleness threshold (the
-- database froze, the network dropped) was as blind as the workers it would judge; it
-- judges none of them silent, and reaps no lease, until it has itself been in contact for
-- a full threshold again (docs/design/database-bad-days.md, "A pause is not a death").
-- Nullable with no default: a catalog-only change; NULL reads as started_at.

ALTER TABLE workers ADD COLUMN IF NOT EXISTS contact_since timestamptz;

-- An attempt given up because its worker could not reach the database ends
-- 'interrupted': the job was not at fault, so it does not count against max_retries
-- (docs/design/database-bad-days.md, "Infrastructure faults do not spend retries"). NOT VALID: every
-- existing row already satisfies the wider check, so no table scan is needed.
ALTER TABLE executions DROP CONSTRAINT IF EXISTS executions_outcome_check;
ALTER TABLE executions ADD CONSTRAINT executions_outcome_check CHECK (outcome IS NULL OR outcome IN
    ('succeeded', 'failed', 'crashed', 'interrupted', 'timed_out', 'cancelled', 'released'))
    NOT VALID;

-- Who asked for a job's cancel (`heartq jobs cancel` or `app.cancel`, with user, host and
-- pid), so `heartq jobs show` can say who stopped it.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS cancelled_by text;

-- A job its task completed inside `ctx.transaction()` is succeeded at that commit, and
-- its result (what the task returns after) lands a moment later: until then, and no
-- longer than the lease of the attempt that committed it, waiters wait for it.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS result_pending boolean NOT NULL DEFAULT false;

-- Since when liveness probes have found the worker's liveness lock free (database time),
-- NULL while it is held: kept here rather than in each prober's memory, so the grace a
-- free lock must last spans the probes of every worker (docs/design/protocol.md, step 11).
ALTER TABLE workers ADD COLUMN IF NOT EXISTS lock_free_since timestamptz;
