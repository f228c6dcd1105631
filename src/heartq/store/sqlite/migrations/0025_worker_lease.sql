-- heartq schema v25 (SQLite): the lease of a running attempt is its worker's.
-- See the PostgreSQL migration of the same number for what each part is for.
-- Runs once, in the migration's BEGIN IMMEDIATE transaction with its version row.
ALTER TABLE heartq_workers ADD COLUMN lease_expires_at REAL;
ALTER TABLE heartq_jobs ADD COLUMN detached_until REAL;

UPDATE heartq_jobs SET detached_until = coalesce(lease_expires_at, (julianday('now') - 2440587.5) * 86400.0)
WHERE status = 'running' AND detached_until IS NULL;

DROP INDEX IF EXISTS heartq_jobs_lease_idx;
CREATE INDEX heartq_workers_lease_idx ON heartq_workers (lease_expires_at)
    WHERE lease_expires_at IS NOT NULL;
CREATE INDEX heartq_jobs_detached_idx ON heartq_jobs (detached_until)
    WHERE status = 'running' AND detached_until IS NOT NULL;
