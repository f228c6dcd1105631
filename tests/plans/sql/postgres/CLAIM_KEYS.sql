WITH candidates AS MATERIALIZED (
    SELECT k.key FROM (
        SELECT concurrency_key AS key, max(priority) AS priority, min(run_at) AS run_at,
               max(concurrency_limit) AS most
        FROM job_documents
        WHERE status = 'queued' AND concurrency_key IS NOT NULL AND rate_key IS NULL
          AND queue = ANY(%(queues)s::text[]) AND run_at <= coalesce(to_timestamp(%(now)s::float8), statement_timestamp())
        GROUP BY concurrency_key
    ) AS k
    WHERE k.most > (SELECT count(*) FROM job_documents AS r
                    WHERE r.status = 'running' AND r.concurrency_key IS NOT NULL
                      AND r.concurrency_key = k.key)
    ORDER BY k.priority DESC, k.run_at, k.key
    LIMIT %(limit)s
)
SELECT key FROM candidates
WHERE pg_try_advisory_xact_lock(18507, hashtext(key))
