WITH q(queue) AS MATERIALIZED (SELECT DISTINCT value FROM json_each(:queues)),
keyed AS (
    SELECT j.rowid AS r, j.queue, j.priority, j.fair_key AS key, j.fair_tag AS tag,
           1.0 / coalesce(j.fair_weight, 1.0) AS step, j.id
    FROM q CROSS JOIN heartq_jobs AS j
    WHERE j.rowid IN (
        SELECT rowid FROM heartq_jobs INDEXED BY heartq_jobs_fair_claim_idx
        WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
      AND fair_key IS NOT NULL AND fair_tag IS NOT NULL AND queue = q.queue AND run_at <= :now
        ORDER BY priority DESC, fair_tag, id LIMIT :limit)
), plain AS (
    SELECT j.rowid AS r, j.queue, j.priority, j.run_at, j.id
    FROM q CROSS JOIN heartq_jobs AS j
    WHERE j.rowid IN (SELECT rowid FROM heartq_jobs INDEXED BY heartq_jobs_claim_idx
        WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
      AND fair_key IS NULL AND queue = q.queue AND run_at <= :now
          AND priority IN (
              WITH RECURSIVE level(p) AS (
                  SELECT (SELECT priority FROM heartq_jobs INDEXED BY heartq_jobs_claim_idx
                          WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
      AND fair_key IS NULL AND queue = q.queue
                          ORDER BY priority DESC LIMIT 1)
                  UNION ALL
                  SELECT (SELECT priority FROM heartq_jobs INDEXED BY heartq_jobs_claim_idx
                          WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
      AND fair_key IS NULL AND queue = q.queue AND priority < level.p
                          ORDER BY priority DESC LIMIT 1)
                  FROM level WHERE level.p IS NOT NULL
              )
              SELECT p FROM level)
        ORDER BY priority DESC, run_at, id
        LIMIT :limit)
), shares AS (
    SELECT r, queue, priority, key, tag, step, id FROM keyed
    UNION ALL
    SELECT p.r, p.queue, p.priority, '',
           max(coalesce(c.clock, 0.0), coalesce(f.finish, 0.0)) + row_number() OVER (PARTITION BY p.queue, p.priority
                                         ORDER BY p.run_at, p.id) - 1,
           1.0, p.id
    FROM plain AS p
    LEFT JOIN heartq_fair_clocks AS c ON c.queue = p.queue AND c.priority = p.priority
    LEFT JOIN heartq_fair_finishes AS f
      ON f.queue = p.queue AND f.priority = p.priority AND f.fair_key = ''
)
SELECT s.r, s.queue, s.priority, s.key, s.tag, s.step
FROM shares AS s
LEFT JOIN heartq_fair_clocks AS c ON c.queue = s.queue AND c.priority = s.priority
ORDER BY s.priority DESC, s.tag - coalesce(c.clock, 0.0), s.id
LIMIT :limit
