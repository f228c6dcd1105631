WITH l AS (
    SELECT * FROM (SELECT u.id, coalesce(u.eid, %(leases_eid_all)s::bigint) AS eid
    FROM unnest(%(leases_id)s::text[], %(leases_eid)s::bigint[])
    AS u(id, eid)) AS l ORDER BY id COLLATE "C"
), locked AS (
    SELECT j.*
    FROM l CROSS JOIN LATERAL (
        SELECT j.id, j.status, j.execution_id, j.worker_id FROM job_documents AS j
        WHERE j.id = l.id AND j.execution_id = l.eid AND (%(worker_id)s::text IS NULL OR j.worker_id = %(worker_id)s::text)
        FOR UPDATE OF j
    ) AS j
), landed AS (
    UPDATE job_documents AS j
    SET status = CASE WHEN j.cancel_requested THEN 'cancelled' ELSE 'queued' END,
        attempts = greatest(j.attempts - 1, 0),
        worker_id = CASE WHEN j.cancel_requested THEN j.worker_id END,
        lease_expires_at = NULL,
        detached_until = NULL,
        run_at = CASE WHEN j.cancel_requested THEN j.run_at ELSE coalesce(to_timestamp(%(now)s::float8), now()) END,
        finished_at = CASE WHEN j.cancel_requested THEN coalesce(to_timestamp(%(now)s::float8), now()) END,
        cancel_requested = false,
        updated_at = coalesce(to_timestamp(%(now)s::float8), now())
    FROM locked
    WHERE j.id = locked.id AND j.execution_id = locked.execution_id
      AND locked.status = 'running'
    RETURNING j.id, j.execution_id, j.status, j.awaited, j.has_dependents,
              locked.worker_id AS ran_on, j.started_at, j.rate_key
), closed AS (
    INSERT INTO ended_executions (job_id, execution_id, worker_id, started_at, ended_at,
                                  outcome, rate_key)
    SELECT id, execution_id, ran_on, started_at, coalesce(to_timestamp(%(now)s::float8), now()), 'released', rate_key FROM landed
)
SELECT id, execution_id, status, awaited, has_dependents FROM landed
