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
)
SELECT min(started_at + period - :now) AS wait FROM (
    SELECT started_at, n, period,
           row_number() OVER (PARTITION BY key ORDER BY started_at DESC) AS latest
    FROM (SELECT best.key, best.n, best.period, e.started_at FROM best
        JOIN heartq_ended_executions AS e INDEXED BY heartq_executions_rate_idx
          ON e.rate_key = best.key AND e.started_at > :now - best.period
        UNION ALL
        SELECT best.key, best.n, best.period, r.started_at FROM best
        JOIN heartq_jobs AS r INDEXED BY heartq_jobs_running_rate_idx
          ON r.status = 'running' AND r.rate_key IS NOT NULL AND r.rate_key = best.key
         AND r.started_at > :now - best.period)
)
WHERE latest = n
