WITH c AS (
    SELECT d.job_id, count(*)::integer AS n,
           count(*) FILTER (WHERE e.status = 'dead')::integer AS dead,
           count(*) FILTER (WHERE d.holds)::integer AS unheld,
           min(CASE WHEN e.status <> 'succeeded' THEN d.depends_on || ' ended ' || e.status END)
               AS failed,
           min(CASE WHEN e.status = 'cancelled' THEN d.depends_on || ' ended cancelled' END)
               AS cancelled
    FROM (SELECT DISTINCT unnest(%(ids)s::uuid[])) AS x(id)
    CROSS JOIN LATERAL (
        SELECT job_id, depends_on, holds FROM job_dependencies
        WHERE depends_on = x.id AND ended IS NULL OFFSET 0
    ) AS d
    CROSS JOIN LATERAL (SELECT status FROM jobs WHERE id = x.id LIMIT 1) AS e
    WHERE e.status IN ('succeeded', 'dead', 'cancelled')
    GROUP BY d.job_id
), locked AS (SELECT j.id FROM job_documents AS j WHERE j.id = ANY(ARRAY(SELECT job_id FROM c)) ORDER BY j.id FOR UPDATE OF j)
UPDATE job_documents AS j
SET waiting_for = greatest(j.waiting_for - c.n, 0),
    holders = j.holders - c.unheld + CASE WHEN j.on_dependency_failure = 'block' THEN c.dead ELSE 0 END,
    status = CASE WHEN CASE WHEN j.on_dependency_failure = 'block' THEN c.cancelled ELSE c.failed END IS NOT NULL AND j.on_dependency_failure IS DISTINCT FROM 'run' THEN 'cancelled'
                  WHEN NOT (CASE WHEN j.on_dependency_failure = 'block' THEN c.cancelled ELSE c.failed END IS NOT NULL AND j.on_dependency_failure IS DISTINCT FROM 'run') AND j.waiting_for - c.n <= 0 AND j.holders - c.unheld + CASE WHEN j.on_dependency_failure = 'block' THEN c.dead ELSE 0 END <= 0 THEN 'queued'
                  WHEN j.holders - c.unheld + CASE WHEN j.on_dependency_failure = 'block' THEN c.dead ELSE 0 END > 0 THEN 'blocked' ELSE 'waiting' END,
    run_at = CASE WHEN NOT (CASE WHEN j.on_dependency_failure = 'block' THEN c.cancelled ELSE c.failed END IS NOT NULL AND j.on_dependency_failure IS DISTINCT FROM 'run') AND j.waiting_for - c.n <= 0 AND j.holders - c.unheld + CASE WHEN j.on_dependency_failure = 'block' THEN c.dead ELSE 0 END <= 0 THEN greatest(j.run_at, coalesce(to_timestamp(%(now)s::float8), now())) ELSE j.run_at END,
    finished_at = CASE WHEN CASE WHEN j.on_dependency_failure = 'block' THEN c.cancelled ELSE c.failed END IS NOT NULL AND j.on_dependency_failure IS DISTINCT FROM 'run' THEN coalesce(to_timestamp(%(now)s::float8), now()) END,
    error = CASE WHEN CASE WHEN j.on_dependency_failure = 'block' THEN c.cancelled ELSE c.failed END IS NOT NULL AND j.on_dependency_failure IS DISTINCT FROM 'run' THEN 'dependency_failed: job ' || CASE WHEN j.on_dependency_failure = 'block' THEN c.cancelled ELSE c.failed END ELSE j.error END,
    ready_xid = NULL,
    updated_at = coalesce(to_timestamp(%(now)s::float8), now())
FROM c JOIN locked ON locked.id = c.job_id
WHERE j.id = c.job_id AND j.status IN ('waiting', 'blocked')
RETURNING j.id, j.queue, j.status, j.awaited, j.has_dependents
