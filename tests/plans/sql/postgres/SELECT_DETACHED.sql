SELECT j.job_id AS id, j.execution_id, j.worker_id, d.task, d.queue, j.attempts,
       d.max_retries, d.retry_backoff,
       d.retry_backoff_max, CASE WHEN j.detached_until IS NOT NULL THEN j.detached_until
         ELSE greatest(j.lease_expires_at, w.lease_expires_at) END AS lease_expires_at,
       CASE WHEN j.detached_until IS NOT NULL THEN j.heartbeat_at
         ELSE greatest(j.heartbeat_at, w.last_heartbeat_at) END AS heartbeat_at,
       d.cancel_requested, j.claimed_ahead, w.last_heartbeat_at AS worker_heartbeat_at,
       j.started_at, d.args::text AS args, d.meta::text AS meta,
       (SELECT count(*) FROM ended_executions e
        WHERE e.job_id = j.job_id AND e.outcome = 'crashed')::integer AS crashes,
       (SELECT count(*) FROM ended_executions e
        WHERE e.job_id = j.job_id AND e.outcome = 'interrupted')::integer AS interruptions,
       (SELECT t.retry_rules::text FROM tasks AS t WHERE t.name = d.task) AS retry_rules

FROM leases AS j CROSS JOIN LATERAL (
    SELECT d.task, d.queue, d.max_retries, d.retry_backoff, d.retry_backoff_max,
           d.cancel_requested, d.args, d.meta
    FROM job_documents AS d WHERE d.id = j.job_id LIMIT 1
) AS d LEFT JOIN LATERAL (
    SELECT w.lease_expires_at, w.last_heartbeat_at FROM workers AS w
    WHERE w.id = j.worker_id LIMIT 1
) AS w ON true
WHERE j.detached_until IS NOT NULL AND j.detached_until < coalesce(to_timestamp(%(now)s::float8), now())
ORDER BY j.detached_until
LIMIT %(limit)s
FOR UPDATE OF j SKIP LOCKED
