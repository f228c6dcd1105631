INSERT INTO heartq_ended_executions (job_id, execution_id, worker_id, started_at, ended_at,
                                     outcome, error, crash, rate_key)
SELECT j.id, j.execution_id, j.worker_id, j.started_at, :now,
       json_extract(f.value, '$.outcome'), json_extract(f.value, '$.error'),
       json_extract(f.value, '$.crash'), j.rate_key
FROM json_each(:finishes) AS f
JOIN heartq_jobs AS j INDEXED BY sqlite_autoindex_heartq_jobs_1
  ON j.id = json_extract(f.value, '$.id')
 AND j.execution_id = json_extract(f.value, '$.eid') AND (:worker_id IS NULL OR j.worker_id = :worker_id)
 AND j.status = 'running'
WHERE NOT (json_extract(f.value, '$.status') = 'succeeded'
           AND json_extract(f.value, '$.outcome') = 'succeeded' AND j.rate_key IS NULL);
UPDATE heartq_jobs AS j INDEXED BY sqlite_autoindex_heartq_jobs_1
SET status = CASE WHEN json_extract(f.value, '$.status') = 'queued' AND j.cancel_requested
                  THEN 'cancelled' ELSE json_extract(f.value, '$.status') END,
    run_at = CASE WHEN (json_extract(f.value, '$.status') = 'queued' AND NOT j.cancel_requested) AND NOT json_extract(f.value, '$.keep')
                  THEN :now + json_extract(f.value, '$.delay') ELSE j.run_at END,
    attempts = CASE WHEN json_extract(f.value, '$.outcome')
                         IN ('interrupted', 'released', 'snoozed')
                    THEN max(j.attempts - 1, 0) ELSE j.attempts END,
    snoozes = CASE WHEN json_extract(f.value, '$.outcome') = 'snoozed' THEN j.snoozes + 1
                   ELSE j.snoozes END,
    result = json_extract(f.value, '$.result'),
    error = CASE WHEN json_extract(f.value, '$.outcome') = 'snoozed' THEN j.error
                 ELSE coalesce(json_extract(f.value, '$.error'), j.error) END,
    dead_reason = json_extract(f.value, '$.dead_reason'),
    progress_value = CASE WHEN json_extract(f.value, '$.status') = 'succeeded'
                               AND j.progress_value IS NOT NULL
                          THEN 1.0 ELSE j.progress_value END,
    finished_at = CASE WHEN (json_extract(f.value, '$.status') = 'queued' AND NOT j.cancel_requested) THEN NULL ELSE :now END,
    worker_id = CASE WHEN (json_extract(f.value, '$.status') = 'queued' AND NOT j.cancel_requested) THEN NULL ELSE j.worker_id END,
    lease_expires_at = CASE WHEN json_extract(f.value, '$.pending') THEN coalesce(
        j.detached_until, max(j.lease_expires_at, coalesce(
            (SELECT w.lease_expires_at FROM heartq_workers AS w WHERE w.id = j.worker_id),
            j.lease_expires_at))) END,
    result_pending = coalesce(json_extract(f.value, '$.pending'), 0),
    detached_until = CASE WHEN json_extract(f.value, '$.pending') THEN j.detached_until END,
    cancel_requested = 0,
    fair_tag = NULL,
    updated_at = :now
FROM json_each(:finishes) AS f
WHERE j.id = json_extract(f.value, '$.id')
  AND j.execution_id = json_extract(f.value, '$.eid') AND (:worker_id IS NULL OR j.worker_id = :worker_id)
  AND j.status = 'running'
RETURNING id, execution_id, status, awaited, has_dependents, 0 AS deferred
