DELETE FROM ended_executions WHERE job_id = ANY(%(ids)s::uuid[])
