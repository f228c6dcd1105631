DELETE FROM heartq_job_dependencies WHERE job_id IN (SELECT value FROM json_each(:ids))
