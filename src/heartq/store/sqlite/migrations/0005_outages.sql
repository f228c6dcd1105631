-- heartq schema v5 (SQLite), outages. When each worker's current unbroken run of heartbeats
-- began. A worker whose own heartbeats paused for over half its staleness threshold was as
-- blind as the workers it would judge; it judges none of them silent, and reaps no lease,
-- until it has itself been in contact for a full threshold again (docs/design/database-bad-days.md, "A
-- pause is not a death"). NULL reads as started_at.
-- Runs once, in the migration's BEGIN IMMEDIATE transaction with its version row.

ALTER TABLE heartq_workers ADD COLUMN contact_since REAL;

-- An attempt given up because its worker could not reach the database ends
-- 'interrupted': the job was not at fault, so it does not count against max_retries
-- (docs/design/database-bad-days.md, "Infrastructure faults do not spend retries"). SQLite cannot alter a
-- CHECK constraint: the table is rebuilt (its only index is the primary key).
CREATE TABLE heartq_executions_v5 (
    job_id       TEXT NOT NULL,
    execution_id INTEGER NOT NULL,
    worker_id    TEXT,
    started_at   REAL NOT NULL,
    ended_at     REAL,
    outcome      TEXT CHECK (outcome IS NULL OR outcome IN
                 ('succeeded', 'failed', 'crashed', 'interrupted', 'timed_out', 'cancelled',
                  'released')),
    error        TEXT,
    crash        TEXT,
    PRIMARY KEY (job_id, execution_id)
) WITHOUT ROWID;
INSERT INTO heartq_executions_v5 (job_id, execution_id, worker_id, started_at, ended_at,
                                  outcome, error, crash)
SELECT job_id, execution_id, worker_id, started_at, ended_at, outcome, error, crash
FROM heartq_executions;
DROP TABLE heartq_executions;
ALTER TABLE heartq_executions_v5 RENAME TO heartq_executions;

-- Who asked for a job's cancel (`heartq jobs cancel` or `app.cancel`, with user, host and
-- pid), so `heartq jobs show` can say who stopped it.
ALTER TABLE heartq_jobs ADD COLUMN cancelled_by TEXT;

-- A job its task completed inside `ctx.transaction()` is succeeded at that commit, and
-- its result (what the task returns after) lands a moment later: until then, and no
-- longer than the lease of the attempt that committed it, waiters wait for it.
ALTER TABLE heartq_jobs ADD COLUMN result_pending INTEGER NOT NULL DEFAULT 0;
