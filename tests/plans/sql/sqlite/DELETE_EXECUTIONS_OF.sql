DELETE FROM heartq_ended_executions WHERE job_id IN (SELECT value FROM json_each(:ids))
