WITH picked AS (
    SELECT id FROM job_documents
    WHERE id = ANY(%(ids)s::text[]) AND status = 'queued' AND concurrency_key IS NULL
      AND rate_key IS NULL AND fair_key IS NULL AND run_at <= coalesce(to_timestamp(%(now)s::float8), statement_timestamp())
    ORDER BY id
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
