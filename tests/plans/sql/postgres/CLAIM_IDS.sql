WITH named AS MATERIALIZED (
    SELECT DISTINCT unnest(%(ids)s::uuid[]) AS id
), logged AS MATERIALIZED (
    SELECT r.id, r.entry FROM named AS x
    CROSS JOIN LATERAL (
        SELECT d.id, d.queue, d.priority, d.fair_key, d.ready_xid FROM job_documents AS d
        WHERE d.id = x.id AND d.ready_xid IS NOT NULL AND d.status = 'queued'
          AND num_nonnulls(d.fair_key, d.concurrency_key, d.rate_key) = 0
          AND d.run_at <= coalesce(to_timestamp(%(now)s::float8), statement_timestamp())
        LIMIT 1
    ) AS d
    CROSS JOIN LATERAL (
        SELECT r.job_id AS id, r.ctid AS entry FROM ready AS r
        WHERE r.queue = d.queue AND r.priority = d.priority
          AND r.fair_key = coalesce(d.fair_key, '')
          AND r.ready_xid = d.ready_xid AND r.job_id = d.id
        FOR UPDATE OF r SKIP LOCKED
    ) AS r
    ORDER BY r.id
), due AS MATERIALIZED (
    SELECT d.id FROM named AS x
    CROSS JOIN LATERAL (
        SELECT d.id FROM job_documents AS d
        WHERE d.id = x.id AND d.status = 'queued' AND d.ready_xid IS NULL
          AND num_nonnulls(d.fair_key, d.concurrency_key, d.rate_key) = 0
          AND d.run_at <= coalesce(to_timestamp(%(now)s::float8), statement_timestamp())
        FOR UPDATE OF d SKIP LOCKED
    ) AS d
    ORDER BY d.id
), picked AS (
    SELECT id, entry FROM logged
    UNION ALL
    SELECT id, NULL::tid FROM due
), holder AS (
    SELECT lease_expires_at FROM workers WHERE id = %(worker_id)s FOR KEY SHARE
), taken AS (
    DELETE FROM ready WHERE ctid = ANY(ARRAY(SELECT entry FROM picked WHERE entry IS NOT NULL))
), commit_mode AS MATERIALIZED (
    SELECT CASE WHEN statement_timestamp() - pg_postmaster_start_time()
                 >= make_interval(secs => current_setting('heartq.claim_async_after', true)::float8)
            THEN set_config('synchronous_commit', 'off', true) END AS setting
), running AS (
    UPDATE job_documents AS j
    SET status = 'running', started_at = coalesce(to_timestamp(%(now)s::float8), statement_timestamp()), updated_at = coalesce(to_timestamp(%(now)s::float8), statement_timestamp()),
        ready_xid = NULL, progress_value = NULL, progress_stage = NULL, progress_message = NULL
    WHERE j.id = ANY(ARRAY(SELECT id FROM picked WHERE entry IS NULL))
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
    FROM docs AS d CROSS JOIN commit_mode
    RETURNING job_id, execution_id, attempts, lease_expires_at
)
SELECT d.id, d.task, d.queue, d.args::text AS args, c.attempts, c.execution_id, d.max_retries,
       d.retry_backoff, d.retry_backoff_max, d.checkpoint::text AS checkpoint,
       extract(epoch from c.lease_expires_at)::float8 AS lease_expires_at,
       extract(epoch from d.run_at)::float8 AS run_at, d.priority, d.chosen,
       d.meta::text AS meta, d.dependency_results, d.snoozes,
       extract(epoch from d.expires_at - coalesce(to_timestamp(%(now)s::float8), statement_timestamp()))::float8 AS expires_in
FROM claimed AS c JOIN docs AS d ON d.id = c.job_id
