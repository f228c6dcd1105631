-- heartq schema v36 (PostgreSQL): a task's own expiry, in its declaration.
--
-- `expires`: seconds, for a task declared with `expires=` (`@app.task(expires=60)`):
-- each job an enqueue makes of it without an `expires` of its own, by name from a
-- program without its code too, must have started within that long of when it was
-- first due, else it ends cancelled, never run (its `jobs.expires_at`, schema v33, is
-- set at the enqueue). NULL: no expiry, and what workers of older versions declared.
-- A nullable column without a default: a catalog-only change, no table rewrite.

ALTER TABLE tasks ADD COLUMN IF NOT EXISTS expires float8;
