SELECT j.id, j.execution_id
FROM json_each(:ids) AS h
JOIN heartq_jobs AS j INDEXED BY sqlite_autoindex_heartq_jobs_1 ON j.id = h.value
WHERE j.worker_id = :worker_id AND j.status = 'running' AND j.cancel_requested
