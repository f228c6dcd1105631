WITH ended AS (
    DELETE FROM leases AS l
    WHERE l.job_id = ANY(%(finishes_id)s::uuid[])
      AND l.execution_id = coalesce((%(finishes_eid)s::bigint[])[CASE WHEN num_nonnulls(%(finishes_eid)s::bigint[]) > 0 THEN array_position(%(finishes_id)s::uuid[], l.job_id) END], %(finishes_eid_all)s::bigint) AND (%(worker_id)s::text IS NULL OR l.worker_id IS NOT DISTINCT FROM %(worker_id)s::text)
    RETURNING l.job_id, l.execution_id, l.worker_id, l.attempts, l.started_at, l.lease_expires_at, l.heartbeat_at, l.detached_until, l.claimed_ahead
), locked AS (
    SELECT e.job_id AS id, e.*,
           coalesce((%(finishes_status)s::text[])[p.place], %(finishes_status_all)s::text) AS f_status,
           coalesce((%(finishes_outcome)s::text[])[p.place], %(finishes_outcome_all)s::text) AS f_outcome,
           coalesce((%(finishes_result)s::text[])[p.place], %(finishes_result_all)s::text) AS f_result,
           coalesce((%(finishes_error)s::text[])[p.place], %(finishes_error_all)s::text) AS f_error,
           coalesce((%(finishes_delay)s::float8[])[p.place], %(finishes_delay_all)s::float8) AS f_delay,
           coalesce((%(finishes_keep)s::boolean[])[p.place], %(finishes_keep_all)s::boolean) AS f_keep,
           coalesce((%(finishes_dead_reason)s::text[])[p.place], %(finishes_dead_reason_all)s::text) AS f_dead_reason,
           coalesce((%(finishes_crash)s::text[])[p.place], %(finishes_crash_all)s::text) AS f_crash,
           coalesce((%(finishes_pending)s::boolean[])[p.place], %(finishes_pending_all)s::boolean) AS f_pending
    FROM ended AS e CROSS JOIN LATERAL (
        SELECT CASE WHEN num_nonnulls(%(finishes_status)s::text[], %(finishes_outcome)s::text[], %(finishes_result)s::text[], %(finishes_error)s::text[], %(finishes_delay)s::float8[], %(finishes_keep)s::boolean[], %(finishes_dead_reason)s::text[], %(finishes_crash)s::text[], %(finishes_pending)s::boolean[]) > 0 THEN array_position(%(finishes_id)s::uuid[], e.job_id) END AS place
    ) AS p
), kept AS (
    SELECT l.id, l.execution_id, l.worker_id, l.attempts, l.started_at, l.heartbeat_at,
           l.claimed_ahead, l.f_result, j.awaited
    FROM locked AS l JOIN job_documents AS j ON j.id = l.id
    WHERE l.f_status = 'succeeded' AND l.f_pending IS NOT TRUE AND j.status = 'queued' AND NOT j.has_dependents AND j.unique_key IS NULL
        AND j.rate_key IS NULL
    FOR SHARE OF j
), appended AS (
    INSERT INTO job_ends (job_id, status, execution_id, worker_id, attempts, started_at,
                          heartbeat_at, finished_at, claimed_ahead, result)
    SELECT id, 'succeeded', execution_id, worker_id, attempts, started_at, heartbeat_at,
           coalesce(to_timestamp(%(now)s::float8), now()), claimed_ahead, f_result::json
    FROM kept
), landed AS (
    UPDATE job_documents AS j
    SET status = CASE WHEN locked.f_status = 'queued' AND j.cancel_requested
                      THEN 'cancelled' ELSE locked.f_status END,
        run_at = CASE WHEN (locked.f_status = 'queued' AND NOT j.cancel_requested) AND NOT locked.f_keep
                      THEN coalesce(to_timestamp(%(now)s::float8), now()) + make_interval(secs => locked.f_delay) ELSE j.run_at END,
        attempts = CASE WHEN locked.f_outcome IN ('interrupted', 'released', 'snoozed')
                        THEN greatest(locked.attempts - 1, 0) ELSE locked.attempts END,
        execution_id = locked.execution_id,
        started_at = locked.started_at,
        heartbeat_at = locked.heartbeat_at,
        claimed_ahead = locked.claimed_ahead,
        ready_xid = NULL,
        snoozes = CASE WHEN locked.f_outcome = 'snoozed' THEN j.snoozes + 1
                       ELSE j.snoozes END,
        result = locked.f_result::json,
        error = CASE WHEN locked.f_outcome = 'snoozed' THEN j.error
                     ELSE coalesce(locked.f_error, j.error) END,
        dead_reason = locked.f_dead_reason,
        progress_value = CASE WHEN locked.f_status = 'succeeded' AND j.progress_value IS NOT NULL
                              THEN 1.0 ELSE j.progress_value END,
        finished_at = CASE WHEN (locked.f_status = 'queued' AND NOT j.cancel_requested) THEN NULL ELSE coalesce(to_timestamp(%(now)s::float8), now()) END,
        worker_id = CASE WHEN (locked.f_status = 'queued' AND NOT j.cancel_requested) THEN NULL ELSE locked.worker_id END,
        lease_expires_at = CASE WHEN locked.f_pending THEN coalesce(locked.detached_until, greatest(locked.lease_expires_at,
            (SELECT w.lease_expires_at FROM workers AS w WHERE w.id = locked.worker_id))) END,
        result_pending = coalesce(locked.f_pending, false),
        detached_until = CASE WHEN locked.f_pending THEN locked.detached_until END,
        cancel_requested = false,
        updated_at = coalesce(to_timestamp(%(now)s::float8), now())
    FROM locked
    WHERE j.id = locked.id AND NOT (%(defer)s AND j.has_dependents)
      AND locked.id NOT IN (SELECT id FROM kept)
    RETURNING j.id, locked.execution_id AS execution_id, j.status, j.awaited,
              j.has_dependents, locked.worker_id AS ran_on, locked.started_at AS started_at,
              j.rate_key, locked.f_outcome, locked.f_error, locked.f_crash
), restored AS (
    INSERT INTO leases (job_id, execution_id, worker_id, attempts, started_at, lease_expires_at, heartbeat_at, detached_until, claimed_ahead)
    SELECT job_id, execution_id, worker_id, attempts, started_at, lease_expires_at, heartbeat_at, detached_until, claimed_ahead FROM ended WHERE %(defer)s
      AND (SELECT count(*) FROM landed) + (SELECT count(*) FROM kept)
          < (SELECT count(*) FROM ended)
      AND job_id NOT IN (SELECT id FROM landed) AND job_id NOT IN (SELECT id FROM kept)
), closed AS (
    INSERT INTO ended_executions (job_id, execution_id, worker_id, started_at, ended_at,
                                  outcome, error, crash, rate_key)
    SELECT id, execution_id, ran_on, started_at, coalesce(to_timestamp(%(now)s::float8), now()), f_outcome, f_error, f_crash::json,
           rate_key
    FROM landed
    WHERE NOT (status = 'succeeded' AND f_outcome = 'succeeded' AND rate_key IS NULL)
)
SELECT id, execution_id, status, awaited, has_dependents, false AS deferred FROM landed
UNION ALL
SELECT id, execution_id, 'succeeded', awaited, false, false FROM kept
UNION ALL
SELECT job_id, execution_id, 'running', false, true, true FROM ended WHERE %(defer)s
      AND (SELECT count(*) FROM landed) + (SELECT count(*) FROM kept)
          < (SELECT count(*) FROM ended)
      AND job_id NOT IN (SELECT id FROM landed) AND job_id NOT IN (SELECT id FROM kept)
