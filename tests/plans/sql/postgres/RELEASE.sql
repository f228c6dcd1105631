WITH g AS (
    SELECT * FROM (SELECT u.id, coalesce(u.eid, %(leases_eid_all)s::bigint) AS eid
    FROM unnest(%(leases_id)s::uuid[], %(leases_eid)s::bigint[])
    AS u(id, eid)) AS g ORDER BY id
), locked AS (
    SELECT j.*
    FROM g CROSS JOIN LATERAL (
        SELECT l.job_id AS id, 'running'::text AS status, l.execution_id, l.worker_id, l.attempts, l.started_at, l.heartbeat_at, l.lease_expires_at, l.detached_until, l.claimed_ahead FROM leases AS l
        WHERE l.job_id = g.id AND l.execution_id = g.eid AND (%(worker_id)s::text IS NULL OR l.worker_id IS NOT DISTINCT FROM %(worker_id)s::text)
        FOR UPDATE OF l
    ) AS j
), ended AS (
    DELETE FROM leases WHERE job_id = ANY(ARRAY(SELECT id FROM locked))
), landed AS (
    UPDATE job_documents AS j
    SET status = CASE WHEN j.cancel_requested THEN 'cancelled' ELSE 'queued' END,
        attempts = greatest(locked.attempts - 1, 0),
        execution_id = locked.execution_id,
        started_at = locked.started_at,
        heartbeat_at = locked.heartbeat_at,
        claimed_ahead = locked.claimed_ahead,
        ready_xid = NULL,
        worker_id = CASE WHEN j.cancel_requested THEN locked.worker_id END,
        lease_expires_at = NULL,
        detached_until = NULL,
        run_at = CASE WHEN j.cancel_requested THEN j.run_at ELSE coalesce(to_timestamp(%(now)s::float8), now()) END,
        finished_at = CASE WHEN j.cancel_requested THEN coalesce(to_timestamp(%(now)s::float8), now()) END,
        cancel_requested = false,
        updated_at = coalesce(to_timestamp(%(now)s::float8), now())
    FROM locked
    WHERE j.id = locked.id AND j.id = ANY(ARRAY(SELECT id FROM locked))
    RETURNING j.id, locked.execution_id AS execution_id, j.status, j.awaited,
              j.has_dependents, locked.worker_id AS ran_on, locked.started_at AS started_at,
              j.rate_key
), closed AS (
    INSERT INTO ended_executions (job_id, execution_id, worker_id, started_at, ended_at,
                                  outcome, rate_key)
    SELECT id, execution_id, ran_on, started_at, coalesce(to_timestamp(%(now)s::float8), now()), 'released', rate_key FROM landed
)
SELECT id, execution_id, status, awaited, has_dependents FROM landed
