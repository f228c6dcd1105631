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
    WITH RECURSIVE q(queue) AS (SELECT DISTINCT value FROM json_each(:queues)),
    keys(queue, key) AS (
        SELECT q.queue, (SELECT concurrency_key
                         FROM heartq_jobs INDEXED BY heartq_jobs_keyed_claim_idx
                         WHERE status = 'queued' AND concurrency_key IS NOT NULL AND rate_key IS NULL AND queue = q.queue
                         ORDER BY concurrency_key LIMIT 1)
        FROM q
        UNION ALL
        SELECT keys.queue, (SELECT concurrency_key
                            FROM heartq_jobs INDEXED BY heartq_jobs_keyed_claim_idx
                            WHERE status = 'queued' AND concurrency_key IS NOT NULL AND rate_key IS NULL AND queue = keys.queue
                              AND concurrency_key > keys.key
                            ORDER BY concurrency_key LIMIT 1)
        FROM keys WHERE keys.key IS NOT NULL
    ), best AS MATERIALIZED (
        SELECT keys.key, b.priority, b.run_at, b.concurrency_limit AS most
        FROM keys JOIN heartq_jobs AS b
          ON b.rowid = (SELECT rowid FROM heartq_jobs INDEXED BY heartq_jobs_keyed_claim_idx
        WHERE status = 'queued' AND concurrency_key IS NOT NULL AND rate_key IS NULL AND queue = keys.queue AND concurrency_key = keys.key AND run_at <= :now
          AND priority IN (
              WITH RECURSIVE level(p) AS (
                  SELECT (SELECT priority FROM heartq_jobs INDEXED BY heartq_jobs_keyed_claim_idx
                          WHERE status = 'queued' AND concurrency_key IS NOT NULL AND rate_key IS NULL AND queue = keys.queue AND concurrency_key = keys.key
                          ORDER BY priority DESC LIMIT 1)
                  UNION ALL
                  SELECT (SELECT priority FROM heartq_jobs INDEXED BY heartq_jobs_keyed_claim_idx
                          WHERE status = 'queued' AND concurrency_key IS NOT NULL AND rate_key IS NULL AND queue = keys.queue AND concurrency_key = keys.key AND priority < level.p
                          ORDER BY priority DESC LIMIT 1)
                  FROM level WHERE level.p IS NOT NULL
              )
              SELECT p FROM level)
        ORDER BY priority DESC, run_at, id
        LIMIT 1)
        WHERE keys.key IS NOT NULL
    ), open AS MATERIALIZED (
        SELECT key, running FROM (
            SELECT key, max(priority) AS priority, min(run_at) AS run_at, max(most) AS most,
                   (SELECT count(*) FROM heartq_jobs AS r INDEXED BY heartq_jobs_key_running_idx
                    WHERE r.status = 'running' AND r.concurrency_key IS NOT NULL
                      AND r.concurrency_key = best.key) AS running
            FROM best GROUP BY key
        )
        WHERE most > running
        ORDER BY priority DESC, run_at, key
        LIMIT :limit
    ), ranked AS (
        SELECT c.id, c.priority, c.run_at, c.concurrency_limit, open.running,
               row_number() OVER (PARTITION BY open.key
                                  ORDER BY c.priority DESC, c.run_at, c.id) AS rank
        FROM open CROSS JOIN q JOIN heartq_jobs AS c
          ON c.rowid IN (SELECT rowid FROM heartq_jobs INDEXED BY heartq_jobs_keyed_claim_idx
        WHERE status = 'queued' AND concurrency_key IS NOT NULL AND rate_key IS NULL AND queue = q.queue AND concurrency_key = open.key AND run_at <= :now
          AND priority IN (
              WITH RECURSIVE level(p) AS (
                  SELECT (SELECT priority FROM heartq_jobs INDEXED BY heartq_jobs_keyed_claim_idx
                          WHERE status = 'queued' AND concurrency_key IS NOT NULL AND rate_key IS NULL AND queue = q.queue AND concurrency_key = open.key
                          ORDER BY priority DESC LIMIT 1)
                  UNION ALL
                  SELECT (SELECT priority FROM heartq_jobs INDEXED BY heartq_jobs_keyed_claim_idx
                          WHERE status = 'queued' AND concurrency_key IS NOT NULL AND rate_key IS NULL AND queue = q.queue AND concurrency_key = open.key AND priority < level.p
                          ORDER BY priority DESC LIMIT 1)
                  FROM level WHERE level.p IS NOT NULL
              )
              SELECT p FROM level)
        ORDER BY priority DESC, run_at, id
        LIMIT :limit)
    )
    SELECT id FROM ranked WHERE rank <= concurrency_limit - running
    ORDER BY priority DESC, run_at, id
    LIMIT :limit
)
RETURNING id, task, queue, args, attempts, execution_id, max_retries, retry_backoff,
          retry_backoff_max, checkpoint, lease_expires_at, run_at, priority, chosen, meta,
          dependency_results, snoozes, expires_at - :now AS expires_in
