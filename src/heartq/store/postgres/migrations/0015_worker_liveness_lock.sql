-- heartq schema v15 (PostgreSQL): whether each worker holds a liveness lock.
--
-- `liveness_lock`: true for a worker holding its session advisory lock (every worker of
-- older versions, and every worker with a lasting session). False for a worker behind a
-- connection pooler in transaction mode without a direct URL (`?pooler=transaction`,
-- docs/OPERATIONS.md "Behind a connection pooler"): it has no session to hold a lock on,
-- so its lock is always free, and a probe that tried it would take the live worker for
-- dead. Probes, operator reads and startup reconciliation try only the locks of workers
-- that hold one; the others are judged by their heartbeats and leases alone.
-- A constant default: a catalog-only change, no table rewrite.

ALTER TABLE workers ADD COLUMN IF NOT EXISTS liveness_lock boolean NOT NULL DEFAULT true;
