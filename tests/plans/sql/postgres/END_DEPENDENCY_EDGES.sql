UPDATE job_dependencies AS d
SET (ended, holds) = (
    SELECT e.status,
           coalesce(e.status = 'dead' AND j.status = 'blocked'
                    AND j.on_dependency_failure = 'block', false)
    FROM (SELECT status FROM jobs WHERE id = d.depends_on LIMIT 1) AS e
    LEFT JOIN LATERAL (
        SELECT status, on_dependency_failure FROM jobs WHERE id = d.job_id LIMIT 1
    ) AS j ON true
)
WHERE d.depends_on = ANY(%(ids)s::uuid[]) AND d.ended IS NULL
  AND (SELECT status FROM jobs WHERE id = d.depends_on LIMIT 1) IN ('succeeded', 'dead', 'cancelled')
