UPDATE heartq_jobs
SET status = 'running',
    worker_id = :worker_id,
    execution_id = execution_id + 1,
    attempts = attempts + 1,
    lease_expires_at = :now + :lease,
    detached_until = CASE WHEN (SELECT w.lease_expires_at FROM heartq_workers AS w
                                WHERE w.id = :worker_id) IS NULL THEN :now + :lease END,
    heartbeat_at = :now,
    started_at = :now,
    updated_at = :now,
    claimed_ahead = :ahead,
    progress_value = NULL, progress_stage = NULL, progress_message = NULL
WHERE id IN (
    SELECT id FROM (
        SELECT c.id, c.priority, c.run_at, c.concurrency_limit,
               row_number() OVER (PARTITION BY c.concurrency_key
                                  ORDER BY c.priority DESC, c.run_at, c.id) AS rank,
               (SELECT count(*) FROM heartq_jobs AS r INDEXED BY heartq_jobs_key_running_idx
                WHERE r.status = 'running' AND r.concurrency_key IS NOT NULL
                  AND r.concurrency_key = c.concurrency_key) AS running
        FROM heartq_jobs AS c INDEXED BY heartq_jobs_keyed_claim_idx
        WHERE c.status = 'queued' AND c.concurrency_key IS NOT NULL AND c.rate_key IS NULL
          AND c.queue IN (SELECT value FROM json_each(:queues))
          AND c.run_at <= :now
    )
    WHERE rank <= concurrency_limit - running
    ORDER BY priority DESC, run_at, id
    LIMIT :limit
)
RETURNING id, task, queue, args, attempts, execution_id, max_retries, retry_backoff,
          retry_backoff_max, checkpoint, lease_expires_at, run_at, priority, chosen, meta,
          dependency_results, snoozes, expires_at - :now AS expires_in
