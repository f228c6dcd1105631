UPDATE job_dependencies AS d SET holds = NOT d.holds
WHERE d.depends_on = ANY(%(ids)s::uuid[]) AND d.ended IS NULL
  AND d.holds <> ((SELECT status FROM jobs WHERE id = d.depends_on LIMIT 1) = 'blocked')
RETURNING d.job_id, d.holds
