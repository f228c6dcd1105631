WITH candidates AS MATERIALIZED (
    SELECT c.* FROM unnest(%(rate_keys)s::text[]) AS k(key)
    CROSS JOIN LATERAL (
        SELECT id, priority, run_at, rate_key, rate_limit, rate_period, concurrency_key,
               concurrency_limit 
        FROM jobs
        WHERE status = 'queued' AND rate_key IS NOT NULL AND rate_key = k.key
          AND queue = ANY(%(queues)s::text[]) AND run_at <= coalesce(to_timestamp(%(now)s::float8), statement_timestamp())
        ORDER BY priority DESC, run_at, id
        LIMIT %(limit)s
    ) AS c
), windows AS MATERIALIZED (
    SELECT g.key, g.period,
           (SELECT count(*) FROM (
    SELECT rate_key, started_at FROM ended_executions
    UNION ALL
    SELECT rate_key, started_at FROM jobs WHERE status = 'running'
) AS e
            WHERE e.rate_key IS NOT NULL AND e.rate_key = g.key
              AND e.started_at > coalesce(to_timestamp(%(now)s::float8), statement_timestamp()) - make_interval(secs => g.period)) AS used
    FROM (SELECT DISTINCT rate_key AS key, rate_period AS period FROM candidates) AS g
), slots AS MATERIALIZED (
    SELECT k.key, (SELECT count(*) FROM jobs AS r
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
), claimed AS (
    UPDATE job_documents AS j
    SET status = 'running',
        worker_id = %(worker_id)s,
        execution_id = j.execution_id + 1,
        attempts = j.attempts + 1,
        lease_expires_at = coalesce(to_timestamp(%(now)s::float8), statement_timestamp()) + make_interval(secs => %(lease)s::float8),
        detached_until = CASE WHEN (SELECT lease_expires_at FROM holder) IS NULL
                              THEN coalesce(to_timestamp(%(now)s::float8), statement_timestamp()) + make_interval(secs => %(lease)s::float8) END,
        heartbeat_at = coalesce(to_timestamp(%(now)s::float8), statement_timestamp()),
        started_at = coalesce(to_timestamp(%(now)s::float8), statement_timestamp()),
        updated_at = coalesce(to_timestamp(%(now)s::float8), statement_timestamp()),
        claimed_ahead = %(ahead)s,
        ready_xid = NULL,
        progress_value = NULL, progress_stage = NULL, progress_message = NULL
    WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
    RETURNING j.*
)
SELECT id, task, queue, args::text AS args, attempts, execution_id, max_retries,
       retry_backoff, retry_backoff_max, checkpoint::text AS checkpoint,
       extract(epoch from lease_expires_at)::float8 AS lease_expires_at,
       extract(epoch from run_at)::float8 AS run_at, priority, chosen, meta::text AS meta,
       dependency_results, snoozes,
       extract(epoch from expires_at - coalesce(to_timestamp(%(now)s::float8), statement_timestamp()))::float8 AS expires_in
FROM claimed
