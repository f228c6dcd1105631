WITH RECURSIVE keys AS (
    SELECT q.name AS queue, k.* FROM (SELECT DISTINCT unnest(%(queues)s::text[]) AS name) AS q
    CROSS JOIN LATERAL (
        SELECT concurrency_key AS key, priority, run_at, id FROM job_documents
        WHERE status = 'queued' AND concurrency_key IS NOT NULL AND rate_key IS NULL AND queue = q.name
        ORDER BY concurrency_key, priority DESC, run_at, id
        LIMIT 1
    ) AS k
    UNION ALL
    SELECT keys.queue, n.* FROM keys CROSS JOIN LATERAL (
        SELECT concurrency_key AS key, priority, run_at, id FROM job_documents
        WHERE status = 'queued' AND concurrency_key IS NOT NULL AND rate_key IS NULL AND queue = keys.queue AND concurrency_key > keys.key
        ORDER BY concurrency_key, priority DESC, run_at, id
        LIMIT 1
    ) AS n
), best AS MATERIALIZED (
    SELECT DISTINCT ON (b.key) b.key, b.priority, b.run_at, b.id FROM (
        SELECT key, priority, run_at, id FROM keys WHERE run_at <= coalesce(to_timestamp(%(now)s::float8), statement_timestamp())
        UNION ALL
        SELECT keys.key, w.priority, w.run_at, w.id
        FROM keys CROSS JOIN LATERAL (
        WITH RECURSIVE level AS (
            (SELECT priority FROM job_documents
             WHERE status = 'queued' AND concurrency_key IS NOT NULL AND rate_key IS NULL AND queue = keys.queue AND concurrency_key = keys.key
             ORDER BY priority DESC, run_at, id
             LIMIT 1)
            UNION ALL
            SELECT n.priority FROM level CROSS JOIN LATERAL (
                SELECT priority FROM job_documents
                WHERE status = 'queued' AND concurrency_key IS NOT NULL AND rate_key IS NULL AND queue = keys.queue AND concurrency_key = keys.key AND priority < level.priority
                ORDER BY priority DESC, run_at, id
                LIMIT 1
            ) AS n
        )
        SELECT c.* FROM level CROSS JOIN LATERAL (
            SELECT id, priority, run_at, concurrency_limit FROM job_documents
            WHERE status = 'queued' AND concurrency_key IS NOT NULL AND rate_key IS NULL AND queue = keys.queue AND concurrency_key = keys.key AND priority = level.priority
              AND run_at <= coalesce(to_timestamp(%(now)s::float8), statement_timestamp())
            ORDER BY run_at, id
            LIMIT 1
        ) AS c
        LIMIT 1
        ) AS w
        WHERE keys.run_at > coalesce(to_timestamp(%(now)s::float8), statement_timestamp())
    ) AS b
    ORDER BY b.key, b.priority DESC, b.run_at, b.id
), candidates AS MATERIALIZED (
    SELECT o.key FROM (
        SELECT key, id FROM best ORDER BY priority DESC, run_at, key OFFSET 0
    ) AS o
    WHERE (SELECT j.concurrency_limit FROM job_documents AS j WHERE j.id = o.id)
          > (SELECT count(*) FROM job_documents AS r
         WHERE r.status = 'running' AND r.concurrency_key IS NOT NULL
           AND r.concurrency_key = o.key)
    LIMIT %(limit)s
)
SELECT key FROM candidates
WHERE pg_try_advisory_xact_lock(18507, hashtext(key))
