SELECT j.id, j.execution_id, j.worker_id, j.task, j.queue, j.attempts, j.max_retries,
       j.retry_backoff,
       j.retry_backoff_max, CASE WHEN j.detached_until IS NOT NULL THEN j.detached_until
         ELSE greatest(j.lease_expires_at, w.lease_expires_at) END AS lease_expires_at,
       CASE WHEN j.detached_until IS NOT NULL THEN j.heartbeat_at
         ELSE greatest(j.heartbeat_at, w.last_heartbeat_at) END AS heartbeat_at,
       j.cancel_requested, j.claimed_ahead, w.last_heartbeat_at AS worker_heartbeat_at,
       j.started_at, j.args::text AS args, j.meta::text AS meta,
       (SELECT count(*) FROM ended_executions e
        WHERE e.job_id = j.id AND e.outcome = 'crashed')::integer AS crashes,
       (SELECT count(*) FROM ended_executions e
        WHERE e.job_id = j.id AND e.outcome = 'interrupted')::integer AS interruptions,
       (SELECT t.retry_rules::text FROM tasks AS t WHERE t.name = j.task) AS retry_rules

FROM job_documents AS j LEFT JOIN LATERAL (
    SELECT w.lease_expires_at, w.last_heartbeat_at FROM workers AS w
    WHERE w.id = j.worker_id LIMIT 1
) AS w ON true
WHERE j.status = 'running' AND j.detached_until IS NOT NULL AND j.detached_until < coalesce(to_timestamp(%(now)s::float8), now())
ORDER BY j.detached_until
LIMIT %(limit)s
FOR UPDATE OF j SKIP LOCKED
