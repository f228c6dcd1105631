WITH s AS (
    SELECT * FROM (SELECT u.id, coalesce(u.eid, %(leases_eid_all)s::bigint) AS eid
    FROM unnest(%(leases_id)s::text[], %(leases_eid)s::bigint[])
    AS u(id, eid)) AS s ORDER BY id COLLATE "C"
), locked AS (
    SELECT j.*
    FROM s CROSS JOIN LATERAL (
        SELECT j.id, j.status, j.execution_id FROM job_documents AS j
        WHERE j.id = s.id AND j.execution_id = s.eid AND (%(worker_id)s::text IS NULL OR j.worker_id = %(worker_id)s::text)
        FOR UPDATE OF j
    ) AS j
)
UPDATE job_documents AS j
SET claimed_ahead = false,
    started_at = coalesce(to_timestamp(%(now)s::float8), now()),
    heartbeat_at = coalesce(to_timestamp(%(now)s::float8), now()),
    lease_expires_at = coalesce(to_timestamp(%(now)s::float8), now()) + make_interval(secs => %(lease)s::float8),
    detached_until = CASE WHEN j.detached_until IS NOT NULL
                          THEN greatest(j.detached_until, coalesce(to_timestamp(%(now)s::float8), now()) + make_interval(secs => %(lease)s::float8)) END,
    updated_at = coalesce(to_timestamp(%(now)s::float8), now())
FROM locked
WHERE j.id = locked.id AND j.execution_id = locked.execution_id AND locked.status = 'running'
  AND j.claimed_ahead AND NOT j.cancel_requested
RETURNING j.id, j.execution_id
