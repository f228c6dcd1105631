SELECT j.id, j.execution_id, j.worker_id, j.task, j.queue, j.attempts, j.max_retries,
       j.retry_backoff,
       j.retry_backoff_max, CASE WHEN j.detached_until IS NOT NULL THEN j.detached_until
         ELSE max(j.lease_expires_at, coalesce(w.lease_expires_at, j.lease_expires_at)) END AS lease_expires_at,
       CASE WHEN j.detached_until IS NOT NULL THEN j.heartbeat_at
         ELSE max(j.heartbeat_at, coalesce(w.last_heartbeat_at, j.heartbeat_at)) END AS heartbeat_at,
       j.cancel_requested, j.claimed_ahead, w.last_heartbeat_at AS worker_heartbeat_at,
       j.started_at, j.args, j.meta,
       (SELECT count(*) FROM heartq_ended_executions e
        WHERE e.job_id = j.id AND e.outcome = 'crashed') AS crashes,
       (SELECT count(*) FROM heartq_ended_executions e
        WHERE e.job_id = j.id AND e.outcome = 'interrupted') AS interruptions,
       (SELECT t.retry_rules FROM heartq_tasks AS t WHERE t.name = j.task) AS retry_rules

FROM heartq_jobs AS j INDEXED BY heartq_jobs_detached_idx
LEFT JOIN heartq_workers AS w ON w.id = j.worker_id
WHERE j.status = 'running' AND j.detached_until IS NOT NULL AND j.detached_until < :now
ORDER BY j.detached_until
LIMIT :limit
