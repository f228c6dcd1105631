DELETE FROM job_dependencies WHERE job_id = ANY(%(ids)s::uuid[])
