SELECT EXISTS (
    SELECT 1 FROM leases AS l CROSS JOIN LATERAL (
        SELECT d.queue FROM job_documents AS d WHERE d.id = l.job_id LIMIT 1
    ) AS d
    WHERE d.queue = ANY(%(queues)s::text[])
) OR EXISTS (
    SELECT 1 FROM ready WHERE queue = ANY(%(queues)s::text[]) AND run_at <= coalesce(to_timestamp(%(now)s::float8), (SELECT clock_timestamp()))
) OR EXISTS (
    SELECT 1 FROM job_documents
    WHERE concurrency_key IS NULL AND rate_key IS NULL AND ready_xid IS NULL AND status = 'queued' AND queue = ANY(%(queues)s::text[])
          AND (run_at <= coalesce(to_timestamp(%(now)s::float8), (SELECT clock_timestamp())) OR (%(retries)s AND (attempts > 0 OR snoozes > 0)))
) OR EXISTS (
    SELECT 1 FROM job_documents
    WHERE concurrency_key IS NOT NULL AND rate_key IS NULL AND status = 'queued' AND queue = ANY(%(queues)s::text[])
          AND (run_at <= coalesce(to_timestamp(%(now)s::float8), (SELECT clock_timestamp())) OR (%(retries)s AND (attempts > 0 OR snoozes > 0)))
) OR EXISTS (
    SELECT 1 FROM job_documents WHERE rate_key IS NOT NULL AND status = 'queued' AND queue = ANY(%(queues)s::text[])
          AND (run_at <= coalesce(to_timestamp(%(now)s::float8), (SELECT clock_timestamp())) OR (%(retries)s AND (attempts > 0 OR snoozes > 0)))
) OR EXISTS (
    SELECT 1 FROM job_documents AS w CROSS JOIN LATERAL (
        SELECT 1 FROM job_dependencies AS d CROSS JOIN LATERAL (
            SELECT status, run_at, attempts, snoozes FROM jobs WHERE id = d.depends_on LIMIT 1
        ) AS e
        WHERE d.job_id = w.id AND d.ended IS NULL
          AND (e.status IN ('running', 'waiting')
               OR (e.status = 'queued'
                   AND (e.run_at <= coalesce(to_timestamp(%(now)s::float8), (SELECT clock_timestamp()))
                        OR (%(retries)s AND (e.attempts > 0 OR e.snoozes > 0)))))
        LIMIT 1
    ) AS held
    WHERE w.status = 'waiting' AND w.queue = ANY(%(queues)s::text[])
) AS pending
