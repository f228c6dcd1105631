-- heartq schema v25 (PostgreSQL): the lease of a running attempt is its worker's
-- (docs/design/leases.md, "Leases and heartbeats"; docs/design-notes/hot-path.md, "The
-- worker's lease on today's jobs table").
--
-- The heartbeat renews one row, its worker's (`workers.lease_expires_at`), not every
-- attempt's: under a held xmin horizon a rewrite of each attempt's row at every beat left
-- a version of each behind, and the reaper's walk of `jobs_lease_idx` met an entry for
-- every job claimed since (issue 43). A job row's `lease_expires_at` is now its attempt's
-- floor (set by the claim and by a claimed-ahead job's start, never renewed);
-- `detached_until` is the own deadline of an attempt its worker's lease no longer covers
-- (a silent task, a lease the worker dropped, an attempt whose worker has no lease). An
-- attempt's effective lease: `detached_until` if set, else the later of its floor and its
-- worker's lease.
ALTER TABLE workers ADD COLUMN IF NOT EXISTS lease_expires_at timestamptz;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS detached_until timestamptz;

-- Every attempt running at the upgrade keeps the lease it had (its last renewal plus a
-- lease): detached at it. The reaper's scan of detached attempts finds it once that runs
-- out; a worker of this version that names it in a heartbeat attaches it again.
UPDATE jobs SET detached_until = coalesce(lease_expires_at, now())
WHERE status = 'running' AND detached_until IS NULL;

-- The reaper reads workers past their lease, then each one's attempts past their
-- effective lease (`jobs_worker_idx`), and detached attempts past their deadline.
DROP INDEX IF EXISTS jobs_lease_idx;
CREATE INDEX IF NOT EXISTS workers_lease_idx ON workers (lease_expires_at)
    WHERE lease_expires_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_detached_idx ON jobs (detached_until)
    WHERE status = 'running' AND detached_until IS NOT NULL;
