UPDATE heartq_job_dependencies AS d SET holds = (x.status = 'blocked')
FROM heartq_jobs AS x
WHERE d.depends_on IN (SELECT value FROM json_each(:ids)) AND x.id = d.depends_on
  AND d.ended IS NULL AND d.holds <> (x.status = 'blocked')
RETURNING job_id, holds
