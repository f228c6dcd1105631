WITH RECURSIVE keys AS (
    SELECT q.name AS queue, k.key FROM (SELECT DISTINCT unnest(%(queues)s::text[]) AS name) AS q CROSS JOIN LATERAL (
        SELECT rate_key AS key FROM job_documents
        WHERE status = 'queued' AND rate_key IS NOT NULL AND queue = q.name
        ORDER BY rate_key
        LIMIT 1
    ) AS k
    UNION ALL
    SELECT keys.queue, n.key FROM keys CROSS JOIN LATERAL (
        SELECT rate_key AS key FROM job_documents
        WHERE status = 'queued' AND rate_key IS NOT NULL AND queue = keys.queue AND rate_key > keys.key
        ORDER BY rate_key
        LIMIT 1
    ) AS n
), best AS MATERIALIZED (
    SELECT DISTINCT ON (k.key) k.key, b.priority, b.run_at, b.rate_limit AS n,
           b.rate_period AS period
    FROM keys AS k
    CROSS JOIN LATERAL (
        WITH RECURSIVE level AS (
            (SELECT priority FROM job_documents
             WHERE status = 'queued' AND rate_key IS NOT NULL AND queue = k.queue AND rate_key = k.key
             ORDER BY priority DESC, run_at, id
             LIMIT 1)
            UNION ALL
            SELECT n.priority FROM level CROSS JOIN LATERAL (
                SELECT priority FROM job_documents
                WHERE status = 'queued' AND rate_key IS NOT NULL AND queue = k.queue AND rate_key = k.key AND priority < level.priority
                ORDER BY priority DESC, run_at, id
                LIMIT 1
            ) AS n
        )
        SELECT c.* FROM level CROSS JOIN LATERAL (
            SELECT priority, run_at, rate_limit, rate_period FROM job_documents
            WHERE status = 'queued' AND rate_key IS NOT NULL AND queue = k.queue AND rate_key = k.key AND priority = level.priority
              AND run_at <= coalesce(to_timestamp(%(now)s::float8), statement_timestamp())
            ORDER BY run_at, id
            LIMIT 1
        ) AS c
        LIMIT 1
    ) AS b
    ORDER BY k.key, b.priority DESC, b.run_at
), open AS MATERIALIZED (
    SELECT key FROM best
    WHERE n > (SELECT count(*) FROM (
    SELECT rate_key, started_at FROM ended_executions
    UNION ALL
    SELECT rate_key, started_at FROM job_documents WHERE status = 'running'
) AS e
               WHERE e.rate_key IS NOT NULL AND e.rate_key = best.key
                 AND e.started_at > coalesce(to_timestamp(%(now)s::float8), statement_timestamp()) - make_interval(secs => best.period))
    ORDER BY priority DESC, run_at, key
    LIMIT %(limit)s
), keyed AS MATERIALIZED (
    SELECT DISTINCT c.concurrency_key AS key
    FROM open AS o CROSS JOIN (SELECT DISTINCT unnest(%(queues)s::text[]) AS name) AS q
    CROSS JOIN LATERAL (
        WITH RECURSIVE level AS (
            (SELECT priority FROM job_documents
             WHERE status = 'queued' AND rate_key IS NOT NULL AND queue = q.name AND rate_key = o.key
             ORDER BY priority DESC, run_at, id
             LIMIT 1)
            UNION ALL
            SELECT n.priority FROM level CROSS JOIN LATERAL (
                SELECT priority FROM job_documents
                WHERE status = 'queued' AND rate_key IS NOT NULL AND queue = q.name AND rate_key = o.key AND priority < level.priority
                ORDER BY priority DESC, run_at, id
                LIMIT 1
            ) AS n
        )
        SELECT c.* FROM level CROSS JOIN LATERAL (
            SELECT concurrency_key FROM job_documents
            WHERE status = 'queued' AND rate_key IS NOT NULL AND queue = q.name AND rate_key = o.key AND priority = level.priority
              AND run_at <= coalesce(to_timestamp(%(now)s::float8), statement_timestamp())
            ORDER BY run_at, id
            LIMIT %(limit)s
        ) AS c
        LIMIT %(limit)s
    ) AS c
    WHERE c.concurrency_key IS NOT NULL
)
SELECT 'rate' AS kind, key, pg_try_advisory_xact_lock(18514, hashtext(key)) AS locked
FROM open
UNION ALL
SELECT 'concurrency', key, pg_try_advisory_xact_lock(18507, hashtext(key))
FROM keyed
UNION ALL
SELECT 'held', NULL, NULL WHERE EXISTS (SELECT 1 FROM best)
