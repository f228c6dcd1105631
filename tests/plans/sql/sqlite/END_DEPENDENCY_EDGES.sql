UPDATE heartq_job_dependencies AS d
SET ended = e.status,
    holds = (e.status = 'dead' AND j.status = 'blocked' AND j.on_dependency_failure = 'block')
FROM heartq_jobs AS e, heartq_jobs AS j
WHERE d.depends_on IN (SELECT value FROM json_each(:ids)) AND d.ended IS NULL
  AND e.id = d.depends_on AND e.status IN ('succeeded', 'dead', 'cancelled')
  AND j.id = d.job_id
