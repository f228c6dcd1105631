SELECT a.id, a.execution_id
FROM unnest(%(ids)s::uuid[]) AS h(id)
CROSS JOIN LATERAL (
    SELECT j.id, j.execution_id, j.worker_id, j.status, j.cancel_requested
    FROM jobs AS j WHERE j.id = h.id LIMIT 1
) AS a
WHERE a.worker_id = %(worker_id)s AND a.status = 'running' AND a.cancel_requested
