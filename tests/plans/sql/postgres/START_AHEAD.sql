WITH s AS (
    SELECT * FROM (SELECT u.id, coalesce(u.eid, %(leases_eid_all)s::bigint) AS eid
    FROM unnest(%(leases_id)s::uuid[], %(leases_eid)s::bigint[])
    AS u(id, eid)) AS s ORDER BY id
), locked AS (
    SELECT j.*
    FROM s CROSS JOIN LATERAL (
        SELECT l.job_id AS id, 'running'::text AS status, l.execution_id, d.cancel_requested FROM leases AS l JOIN job_documents AS d ON d.id = l.job_id
        WHERE l.job_id = s.id AND l.execution_id = s.eid AND (%(worker_id)s::text IS NULL OR l.worker_id IS NOT DISTINCT FROM %(worker_id)s::text)
        FOR UPDATE OF l FOR SHARE OF d
    ) AS j
)
UPDATE leases AS l
SET claimed_ahead = false,
    started_at = coalesce(to_timestamp(%(now)s::float8), now()),
    heartbeat_at = coalesce(to_timestamp(%(now)s::float8), now()),
    lease_expires_at = coalesce(to_timestamp(%(now)s::float8), now()) + make_interval(secs => %(lease)s::float8),
    detached_until = CASE WHEN l.detached_until IS NOT NULL
                          THEN greatest(l.detached_until, coalesce(to_timestamp(%(now)s::float8), now()) + make_interval(secs => %(lease)s::float8)) END
WHERE l.job_id = ANY(ARRAY(SELECT id FROM locked WHERE NOT cancel_requested))
  AND l.claimed_ahead
RETURNING l.job_id AS id, l.execution_id
