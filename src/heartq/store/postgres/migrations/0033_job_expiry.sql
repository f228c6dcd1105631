-- heartq schema v33 (PostgreSQL): a job not started by a time is dropped, not run late.
--
-- `expires_at`: the time by which the job must have started (the enqueue's `expires=`,
-- Celery's `expires`, RQ's `ttl`), on the database's clock; NULL: it never expires, and
-- what the version before enqueued. The claim returns the seconds left (`expires_in`);
-- the worker that claimed a job past it ends it `cancelled` without running it, no
-- attempt counted (heartq.lifecycle.fate, `CannotRun.EXPIRED`).
-- A nullable column without a default: a catalog-only change, no table rewrite.

ALTER TABLE jobs ADD COLUMN IF NOT EXISTS expires_at timestamptz;
