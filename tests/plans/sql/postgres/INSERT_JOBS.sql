WITH x AS MATERIALIZED (SELECT * FROM (SELECT u.id, coalesce(u.task, %(jobs_task_all)s::text) AS task, coalesce(u.queue, %(jobs_queue_all)s::text) AS queue, coalesce(u.args, %(jobs_args_all)s::text) AS args, coalesce(u.priority, %(jobs_priority_all)s::integer) AS priority, coalesce(u.delay, %(jobs_delay_all)s::float8) AS delay, coalesce(u.max_retries, %(jobs_max_retries_all)s::integer) AS max_retries, coalesce(u.retry_backoff, %(jobs_retry_backoff_all)s::float8) AS retry_backoff, coalesce(u.retry_backoff_max, %(jobs_retry_backoff_max_all)s::float8) AS retry_backoff_max, coalesce(u.chosen, %(jobs_chosen_all)s::integer) AS chosen, coalesce(u.concurrency_key, %(jobs_concurrency_key_all)s::text) AS concurrency_key, coalesce(u.concurrency_limit, %(jobs_concurrency_limit_all)s::integer) AS concurrency_limit, coalesce(u.rate_key, %(jobs_rate_key_all)s::text) AS rate_key, coalesce(u.rate_limit, %(jobs_rate_limit_all)s::integer) AS rate_limit, coalesce(u.rate_period, %(jobs_rate_period_all)s::float8) AS rate_period, coalesce(u.fair_key, %(jobs_fair_key_all)s::text) AS fair_key, coalesce(u.fair_weight, %(jobs_fair_weight_all)s::float8) AS fair_weight, coalesce(u.meta, %(jobs_meta_all)s::text) AS meta, coalesce(u.expires_in, %(jobs_expires_in_all)s::float8) AS expires_in
    FROM unnest(%(jobs_id)s::uuid[], %(jobs_task)s::text[], %(jobs_queue)s::text[], %(jobs_args)s::text[], %(jobs_priority)s::integer[], %(jobs_delay)s::float8[], %(jobs_max_retries)s::integer[], %(jobs_retry_backoff)s::float8[], %(jobs_retry_backoff_max)s::float8[], %(jobs_chosen)s::integer[], %(jobs_concurrency_key)s::text[], %(jobs_concurrency_limit)s::integer[], %(jobs_rate_key)s::text[], %(jobs_rate_limit)s::integer[], %(jobs_rate_period)s::float8[], %(jobs_fair_key)s::text[], %(jobs_fair_weight)s::float8[], %(jobs_meta)s::text[], %(jobs_expires_in)s::float8[])
    AS u(id, task, queue, args, priority, delay, max_retries, retry_backoff, retry_backoff_max, chosen, concurrency_key, concurrency_limit, rate_key, rate_limit, rate_period, fair_key, fair_weight, meta, expires_in)) AS b),
entered AS MATERIALIZED (
    SELECT e.queue, e.priority, e.fair_key,
           pg_advisory_xact_lock_shared(18508,
                                        hashtext(current_schema() || '/' || e.queue || '/' || e.priority::text || CASE WHEN e.fair_key = '' THEN '' ELSE '/' || e.fair_key END))
    FROM (SELECT DISTINCT x.queue, x.priority, coalesce(x.fair_key, '') AS fair_key
          FROM x WHERE x.delay <= 0 AND x.concurrency_key IS NULL AND x.rate_key IS NULL) AS e
),
lane AS (
    INSERT INTO lanes (queue, priority, fair_key)
    SELECT queue, priority, fair_key FROM entered
    ON CONFLICT DO NOTHING
), entries AS (
    INSERT INTO ready (queue, priority, fair_key, ready_xid, job_id, run_at, fair_weight)
    SELECT x.queue, x.priority, coalesce(x.fair_key, ''), pg_current_xact_id(), x.id,
           coalesce(to_timestamp(%(now)s::float8), now()) + make_interval(secs => x.delay), x.fair_weight
    FROM x WHERE x.delay <= 0 AND x.concurrency_key IS NULL AND x.rate_key IS NULL
)
INSERT INTO job_documents (
    id, task, queue, args, priority, status, run_at, max_retries, retry_backoff,
    retry_backoff_max, chosen, created_at, updated_at, concurrency_key, concurrency_limit,
    rate_key, rate_limit, rate_period, fair_key, fair_weight, meta, expires_at, ready_xid)
SELECT x.id, x.task, x.queue, x.args::json, x.priority, 'queued',
       coalesce(to_timestamp(%(now)s::float8), now()) + make_interval(secs => x.delay), x.max_retries, x.retry_backoff,
       x.retry_backoff_max, x.chosen, coalesce(to_timestamp(%(now)s::float8), now()), coalesce(to_timestamp(%(now)s::float8), now()), x.concurrency_key, x.concurrency_limit,
       x.rate_key, x.rate_limit, x.rate_period, x.fair_key, x.fair_weight, x.meta::jsonb,
       coalesce(to_timestamp(%(now)s::float8), now()) + make_interval(secs => x.expires_in),
       CASE WHEN x.delay <= 0 AND x.concurrency_key IS NULL AND x.rate_key IS NULL THEN pg_current_xact_id() END
FROM x
