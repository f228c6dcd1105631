INSERT INTO heartq_ended_executions (job_id, execution_id, worker_id, started_at, ended_at,
                                     outcome, rate_key)
SELECT DISTINCT j.id, j.execution_id, j.worker_id, j.started_at, :now, 'released', j.rate_key
FROM json_each(:leases) AS l
JOIN heartq_jobs AS j INDEXED BY sqlite_autoindex_heartq_jobs_1
  ON j.id = json_extract(l.value, '$.id')
 AND j.execution_id = json_extract(l.value, '$.eid') AND (:worker_id IS NULL OR j.worker_id = :worker_id)
 AND j.status = 'running';
UPDATE heartq_jobs AS j INDEXED BY sqlite_autoindex_heartq_jobs_1
SET status = CASE WHEN j.cancel_requested THEN 'cancelled' ELSE 'queued' END,
    attempts = max(j.attempts - 1, 0),
    worker_id = CASE WHEN j.cancel_requested THEN j.worker_id END,
    lease_expires_at = NULL,
    detached_until = NULL,
    run_at = CASE WHEN j.cancel_requested THEN j.run_at ELSE :now END,
    finished_at = CASE WHEN j.cancel_requested THEN :now END,
    cancel_requested = 0,
    fair_tag = NULL,
    updated_at = :now
FROM json_each(:leases) AS l
WHERE j.id = json_extract(l.value, '$.id')
  AND j.execution_id = json_extract(l.value, '$.eid') AND (:worker_id IS NULL OR j.worker_id = :worker_id)
  AND j.status = 'running'
RETURNING id, execution_id, status, awaited, has_dependents
