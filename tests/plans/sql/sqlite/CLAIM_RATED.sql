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
    SELECT q.queue, (SELECT rate_key FROM heartq_jobs INDEXED BY heartq_jobs_rated_claim_idx
                     WHERE status = 'queued' AND rate_key IS NOT NULL AND queue = q.queue ORDER BY rate_key LIMIT 1)
    FROM q
    UNION ALL
    SELECT keys.queue, (SELECT rate_key FROM heartq_jobs INDEXED BY heartq_jobs_rated_claim_idx
                        WHERE status = 'queued' AND rate_key IS NOT NULL AND queue = keys.queue AND rate_key > keys.key
                        ORDER BY rate_key LIMIT 1)
    FROM keys WHERE keys.key IS NOT NULL
), best AS MATERIALIZED (
    SELECT key, priority, run_at, n, period FROM (
        SELECT keys.key, b.priority, b.run_at, b.rate_limit AS n, b.rate_period AS period,
               row_number() OVER (PARTITION BY keys.key
                                  ORDER BY b.priority DESC, b.run_at) AS place
        FROM keys JOIN heartq_jobs AS b
          ON b.rowid = (SELECT rowid FROM heartq_jobs INDEXED BY heartq_jobs_rated_claim_idx
        WHERE status = 'queued' AND rate_key IS NOT NULL AND queue = keys.queue AND rate_key = keys.key AND run_at <= :now
          AND priority IN (
              WITH RECURSIVE level(p) AS (
                  SELECT (SELECT priority FROM heartq_jobs INDEXED BY heartq_jobs_rated_claim_idx
                          WHERE status = 'queued' AND rate_key IS NOT NULL AND queue = keys.queue AND rate_key = keys.key
                          ORDER BY priority DESC LIMIT 1)
                  UNION ALL
                  SELECT (SELECT priority FROM heartq_jobs INDEXED BY heartq_jobs_rated_claim_idx
                          WHERE status = 'queued' AND rate_key IS NOT NULL AND queue = keys.queue AND rate_key = keys.key AND priority < level.p
                          ORDER BY priority DESC LIMIT 1)
                  FROM level WHERE level.p IS NOT NULL
              )
              SELECT p FROM level)
        ORDER BY priority DESC, run_at, id
        LIMIT 1)
        WHERE keys.key IS NOT NULL
    )
    WHERE place = 1
), open AS MATERIALIZED (
    SELECT key FROM best
    WHERE n > ((SELECT count(*) FROM heartq_ended_executions AS e
                 INDEXED BY heartq_executions_rate_idx
                 WHERE e.rate_key = best.key AND e.started_at > :now - best.period)
              + (SELECT count(*) FROM heartq_jobs AS r INDEXED BY heartq_jobs_running_rate_idx
                 WHERE r.status = 'running' AND r.rate_key IS NOT NULL AND r.rate_key = best.key
                   AND r.started_at > :now - best.period))
    ORDER BY priority DESC, run_at, key
    LIMIT :limit
), candidates AS MATERIALIZED (
        SELECT c.id, c.priority, c.run_at, c.rate_key, c.rate_limit, c.rate_period,
               c.concurrency_key, c.concurrency_limit
        FROM open CROSS JOIN q
        JOIN heartq_jobs AS c ON c.rowid IN (SELECT rowid FROM heartq_jobs INDEXED BY heartq_jobs_rated_claim_idx
        WHERE status = 'queued' AND rate_key IS NOT NULL AND queue = q.queue AND rate_key = open.key AND run_at <= :now
          AND priority IN (
              WITH RECURSIVE level(p) AS (
                  SELECT (SELECT priority FROM heartq_jobs INDEXED BY heartq_jobs_rated_claim_idx
                          WHERE status = 'queued' AND rate_key IS NOT NULL AND queue = q.queue AND rate_key = open.key
                          ORDER BY priority DESC LIMIT 1)
                  UNION ALL
                  SELECT (SELECT priority FROM heartq_jobs INDEXED BY heartq_jobs_rated_claim_idx
                          WHERE status = 'queued' AND rate_key IS NOT NULL AND queue = q.queue AND rate_key = open.key AND priority < level.p
                          ORDER BY priority DESC LIMIT 1)
                  FROM level WHERE level.p IS NOT NULL
              )
              SELECT p FROM level)
        ORDER BY priority DESC, run_at, id
        LIMIT :limit)
    ), windows AS MATERIALIZED (
        SELECT g.rate_key AS key, g.rate_period AS period,
               ((SELECT count(*) FROM heartq_ended_executions AS e
                 INDEXED BY heartq_executions_rate_idx
                 WHERE e.rate_key = g.rate_key AND e.started_at > :now - g.rate_period)
              + (SELECT count(*) FROM heartq_jobs AS r INDEXED BY heartq_jobs_running_rate_idx
                 WHERE r.status = 'running' AND r.rate_key IS NOT NULL AND r.rate_key = g.rate_key
                   AND r.started_at > :now - g.rate_period)) AS used
        FROM (SELECT DISTINCT rate_key, rate_period FROM candidates) AS g
    ), slots AS MATERIALIZED (
        SELECT k.key, (SELECT count(*) FROM heartq_jobs AS r INDEXED BY heartq_jobs_key_running_idx
                    WHERE r.status = 'running' AND r.concurrency_key IS NOT NULL
                      AND r.concurrency_key = k.key) AS running
        FROM (SELECT DISTINCT concurrency_key AS key FROM candidates
              WHERE concurrency_key IS NOT NULL) AS k
    ), fit AS (
        SELECT c.id, c.priority, c.run_at, c.rate_key, c.concurrency_key,
               c.rate_limit - w.used AS room, c.concurrency_limit - s.running AS free
        FROM candidates AS c
        JOIN windows AS w ON w.key = c.rate_key AND w.period = c.rate_period
        LEFT JOIN slots AS s ON s.key = c.concurrency_key
        WHERE c.rate_limit > w.used
    ), within_slots AS (
        SELECT *, row_number() OVER (PARTITION BY concurrency_key
                                     ORDER BY priority DESC, run_at, id) AS place
        FROM fit
    ), ranked AS (
        SELECT id, priority, run_at, room,
               row_number() OVER (PARTITION BY rate_key ORDER BY priority DESC, run_at, id) AS rank
        FROM within_slots WHERE concurrency_key IS NULL OR place <= free
    )
    SELECT id FROM ranked WHERE rank <= room
    ORDER BY priority DESC, run_at, id
    LIMIT :limit
)
RETURNING id, task, queue, args, attempts, execution_id, max_retries, retry_backoff,
          retry_backoff_max, checkpoint, lease_expires_at, run_at, priority, chosen, meta,
          dependency_results, snoozes, expires_at - :now AS expires_in
