-- heartq schema v11 (PostgreSQL): a job's metadata.
--
-- `meta`: a JSON object of the job's caller and enqueue hooks (a tenant, a request id, the
-- caller's trace context), kept with the job and given to each attempt (`ctx.meta`,
-- attempt hooks), never passed to the task's function. NULL for none: jobs without
-- metadata cost nothing more to store or to claim. A nullable column without a default:
-- no table rewrite.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS meta jsonb;
