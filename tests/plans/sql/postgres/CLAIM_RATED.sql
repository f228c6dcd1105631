WITH candidates AS MATERIALIZED (
    SELECT c.* FROM unnest(%(rate_keys)s::text[]) AS k(key) CROSS JOIN (SELECT DISTINCT unnest(%(queues)s::text[]) AS name) AS q
    CROSS JOIN LATERAL (
        WITH RECURSIVE level AS (
            (SELECT priority FROM job_documents
             WHERE status = 'queued' AND rate_key IS NOT NULL AND queue = q.name AND rate_key = k.key
             ORDER BY priority DESC, run_at, id
             LIMIT 1)
            UNION ALL
            SELECT n.priority FROM level CROSS JOIN LATERAL (
                SELECT priority FROM job_documents
                WHERE status = 'queued' AND rate_key IS NOT NULL AND queue = q.name AND rate_key = k.key AND priority < level.priority
                ORDER BY priority DESC, run_at, id
                LIMIT 1
            ) AS n
        )
        SELECT c.* FROM level CROSS JOIN LATERAL (
            SELECT id, priority, run_at, rate_key, rate_limit, rate_period, concurrency_key,
               concurrency_limit FROM job_documents
            WHERE status = 'queued' AND rate_key IS NOT NULL AND queue = q.name AND rate_key = k.key AND priority = level.priority
              AND run_at <= coalesce(to_timestamp(%(now)s::float8), statement_timestamp())
            ORDER BY run_at, id
            LIMIT %(limit)s
        ) AS c
        LIMIT %(limit)s
    ) AS c
), windows AS MATERIALIZED (
    SELECT g.key, g.period,
           (SELECT count(*) FROM (
    SELECT rate_key, started_at FROM ended_executions
    UNION ALL
    SELECT rate_key, started_at FROM job_documents WHERE status = 'running'
) AS e
            WHERE e.rate_key IS NOT NULL AND e.rate_key = g.key
              AND e.started_at > coalesce(to_timestamp(%(now)s::float8), statement_timestamp()) - make_interval(secs => g.period)) AS used
    FROM (SELECT DISTINCT rate_key AS key, rate_period AS period FROM candidates) AS g
), slots AS MATERIALIZED (
    SELECT k.key, (SELECT count(*) FROM job_documents AS r
         WHERE r.status = 'running' AND r.concurrency_key IS NOT NULL
           AND r.concurrency_key = k.key) AS running
    FROM unnest(%(concurrency_keys)s::text[]) AS k(key)
), fit AS (
    SELECT c.id, c.priority, c.run_at, c.rate_key, c.concurrency_key,
           c.rate_limit - w.used AS room, c.concurrency_limit - s.running AS free
    FROM candidates AS c
    JOIN windows AS w ON w.key = c.rate_key AND w.period = c.rate_period
    LEFT JOIN slots AS s ON s.key = c.concurrency_key
    WHERE c.rate_limit > w.used AND (c.concurrency_key IS NULL OR s.key IS NOT NULL)
), within_slots AS (
    SELECT *, row_number() OVER (PARTITION BY concurrency_key
                                 ORDER BY priority DESC, run_at, id) AS place
    FROM fit
), ranked AS (
    SELECT id, room,
           row_number() OVER (PARTITION BY rate_key ORDER BY priority DESC, run_at, id) AS rank
    FROM within_slots WHERE concurrency_key IS NULL OR place <= free
), picked AS (
    SELECT j.id FROM job_documents AS j
    WHERE j.id = ANY(ARRAY(SELECT id FROM ranked WHERE rank <= room)) AND j.status = 'queued'
    ORDER BY j.priority DESC, j.run_at, j.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), holder AS (
    SELECT lease_expires_at FROM workers WHERE id = %(worker_id)s FOR KEY SHARE
), running AS (
    UPDATE job_documents AS j
    SET status = 'running', started_at = coalesce(to_timestamp(%(now)s::float8), statement_timestamp()), updated_at = coalesce(to_timestamp(%(now)s::float8), statement_timestamp()),
        ready_xid = NULL, progress_value = NULL, progress_stage = NULL, progress_message = NULL
    WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
), docs AS MATERIALIZED (
    SELECT j.id, j.task, j.queue, j.args, j.execution_id, j.attempts, j.max_retries,
           j.retry_backoff, j.retry_backoff_max, j.checkpoint, j.run_at, j.priority, j.chosen,
           j.meta, j.dependency_results, j.snoozes, j.expires_at
    FROM job_documents AS j
    WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
), claimed AS (
    INSERT INTO leases (job_id, execution_id, worker_id, attempts, started_at,
                        lease_expires_at, heartbeat_at, detached_until, claimed_ahead)
    SELECT d.id, d.execution_id + 1, %(worker_id)s, d.attempts + 1, coalesce(to_timestamp(%(now)s::float8), statement_timestamp()),
           coalesce(to_timestamp(%(now)s::float8), statement_timestamp()) + make_interval(secs => %(lease)s::float8), coalesce(to_timestamp(%(now)s::float8), statement_timestamp()),
           CASE WHEN (SELECT lease_expires_at FROM holder) IS NULL
                THEN coalesce(to_timestamp(%(now)s::float8), statement_timestamp()) + make_interval(secs => %(lease)s::float8) END,
           %(ahead)s
    FROM docs AS d
    RETURNING job_id, execution_id, attempts, lease_expires_at
)
SELECT d.id, d.task, d.queue, d.args::text AS args, c.attempts, c.execution_id, d.max_retries,
       d.retry_backoff, d.retry_backoff_max, d.checkpoint::text AS checkpoint,
       extract(epoch from c.lease_expires_at)::float8 AS lease_expires_at,
       extract(epoch from d.run_at)::float8 AS run_at, d.priority, d.chosen,
       d.meta::text AS meta, d.dependency_results, d.snoozes,
       extract(epoch from d.expires_at - coalesce(to_timestamp(%(now)s::float8), statement_timestamp()))::float8 AS expires_in
FROM claimed AS c JOIN docs AS d ON d.id = c.job_id
