WITH prior AS MATERIALIZED (
    SELECT lease_expires_at, last_heartbeat_at FROM workers WHERE id = %(worker_id)s
)
UPDATE leases AS l
SET detached_until = greatest(l.lease_expires_at, (SELECT lease_expires_at FROM prior)),
        heartbeat_at = greatest(l.heartbeat_at, (SELECT last_heartbeat_at FROM prior))
WHERE l.job_id = ANY(ARRAY(
    SELECT s.job_id FROM leases AS s
    WHERE s.worker_id = %(worker_id)s AND s.detached_until IS NULL
      AND NOT (s.job_id = ANY(%(renewals_id)s::uuid[]))
    FOR UPDATE SKIP LOCKED
))
