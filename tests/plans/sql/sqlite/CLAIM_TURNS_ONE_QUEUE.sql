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
WHERE rowid IN (
    SELECT rowid FROM heartq_jobs INDEXED BY heartq_jobs_fair_claim_idx
    WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
      AND fair_key IS NOT NULL AND fair_tag IS NOT NULL AND queue = :queue AND run_at <= :now
    ORDER BY priority DESC, fair_tag, id
    LIMIT :limit)
  AND NOT EXISTS (SELECT 1 FROM heartq_jobs INDEXED BY heartq_jobs_claim_idx
                  WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
      AND fair_key IS NULL AND queue = :queue)
  AND NOT EXISTS (SELECT 1 FROM heartq_jobs INDEXED BY heartq_jobs_fair_due_idx
                 WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
                   AND fair_key IS NOT NULL AND fair_tag IS NULL AND queue = :queue
                   AND run_at <= :now)

RETURNING id, task, queue, args, attempts, execution_id, max_retries, retry_backoff,
          retry_backoff_max, checkpoint, lease_expires_at, run_at, priority, chosen, meta,
          dependency_results, snoozes, expires_at - :now AS expires_in,
          fair_key, fair_tag, 1.0 / coalesce(fair_weight, 1.0) AS step
