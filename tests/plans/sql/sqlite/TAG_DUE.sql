WITH due AS MATERIALIZED (
    SELECT rowid AS r, queue, priority, fair_key, run_at, id,
           1.0 / coalesce(fair_weight, 1.0) AS step
    FROM heartq_jobs INDEXED BY heartq_jobs_fair_due_idx
    WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
      AND fair_key IS NOT NULL AND fair_tag IS NULL AND queue IN (SELECT value FROM json_each(:queues)) AND run_at <= :now
    ORDER BY run_at, id
    LIMIT :most
), tagged AS (
    SELECT d.r, max(coalesce(c.clock, 0.0), coalesce(f.finish, 0.0)) + coalesce(sum(d.step) OVER (
               PARTITION BY d.queue, d.priority, d.fair_key ORDER BY d.run_at, d.id
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0.0) AS tag
    FROM due AS d
    LEFT JOIN heartq_fair_clocks AS c ON c.queue = d.queue AND c.priority = d.priority
    LEFT JOIN heartq_fair_finishes AS f
      ON f.queue = d.queue AND f.priority = d.priority AND f.fair_key = d.fair_key
)
UPDATE heartq_jobs SET fair_tag = tagged.tag
FROM tagged WHERE heartq_jobs.rowid = tagged.r
RETURNING queue, priority, fair_key, fair_tag + 1.0 / coalesce(fair_weight, 1.0) AS finish
