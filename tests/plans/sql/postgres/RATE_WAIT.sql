WITH RECURSIVE keys AS (
    (SELECT rate_key AS key FROM job_documents
     WHERE status = 'queued' AND rate_key IS NOT NULL
     ORDER BY rate_key LIMIT 1)
    UNION ALL
    SELECT (SELECT j.rate_key FROM job_documents AS j
            WHERE j.status = 'queued' AND j.rate_key IS NOT NULL AND j.rate_key > k.key
            ORDER BY j.rate_key LIMIT 1)
    FROM keys AS k WHERE k.key IS NOT NULL
), best AS MATERIALIZED (
    SELECT k.key, b.priority, b.run_at, b.rate_limit AS n, b.rate_period AS period
    FROM keys AS k
    CROSS JOIN LATERAL (
        WITH RECURSIVE level AS (
            (SELECT priority FROM job_documents
             WHERE status = 'queued' AND rate_key IS NOT NULL
                AND queue = ANY(%(queues)s::text[]) AND rate_key = k.key
             ORDER BY priority DESC, run_at, id
             LIMIT 1)
            UNION ALL
            SELECT n.priority FROM level CROSS JOIN LATERAL (
                SELECT priority FROM job_documents
                WHERE status = 'queued' AND rate_key IS NOT NULL
                AND queue = ANY(%(queues)s::text[]) AND rate_key = k.key AND priority < level.priority
                ORDER BY priority DESC, run_at, id
                LIMIT 1
            ) AS n
        )
        SELECT c.* FROM level CROSS JOIN LATERAL (
            SELECT priority, run_at, rate_limit, rate_period FROM job_documents
            WHERE status = 'queued' AND rate_key IS NOT NULL
                AND queue = ANY(%(queues)s::text[]) AND rate_key = k.key AND priority = level.priority
              AND run_at <= coalesce(to_timestamp(%(now)s::float8), statement_timestamp())
            ORDER BY run_at, id
            LIMIT 1
        ) AS c
        LIMIT 1
    ) AS b
)
SELECT extract(epoch from min(nth.started_at + make_interval(secs => best.period))
                          - coalesce(to_timestamp(%(now)s::float8), statement_timestamp()))::float8 AS wait
FROM best
CROSS JOIN LATERAL (
    SELECT e.started_at FROM (
    SELECT rate_key, started_at FROM ended_executions
    UNION ALL
    SELECT rate_key, started_at FROM job_documents WHERE status = 'running'
) AS e
    WHERE e.rate_key IS NOT NULL AND e.rate_key = best.key
      AND e.started_at > coalesce(to_timestamp(%(now)s::float8), statement_timestamp()) - make_interval(secs => best.period)
    ORDER BY e.started_at DESC
    LIMIT 1 OFFSET best.n - 1
) AS nth
