WITH prior AS MATERIALIZED (
    SELECT lease_expires_at, last_heartbeat_at FROM workers WHERE id = %(worker_id)s
)
UPDATE job_documents AS j
SET detached_until = greatest(j.lease_expires_at, (SELECT lease_expires_at FROM prior)),
        heartbeat_at = greatest(j.heartbeat_at, (SELECT last_heartbeat_at FROM prior)),
        updated_at = coalesce(to_timestamp(%(now)s::float8), now())
WHERE j.id IN (
    SELECT s.id FROM job_documents AS s
    WHERE s.worker_id = %(worker_id)s AND s.status = 'running' AND s.detached_until IS NULL
      AND NOT (s.id = ANY(%(renewals_id)s::text[]))
    FOR UPDATE SKIP LOCKED
)
