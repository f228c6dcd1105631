UPDATE heartq_jobs AS j INDEXED BY heartq_jobs_worker_idx
SET detached_until = max(j.lease_expires_at, coalesce(
        (SELECT w.lease_expires_at FROM heartq_workers AS w WHERE w.id = :worker_id),
        j.lease_expires_at)), heartbeat_at = max(j.heartbeat_at, coalesce(
        (SELECT w.last_heartbeat_at FROM heartq_workers AS w WHERE w.id = :worker_id),
        j.heartbeat_at)), updated_at = :now
WHERE j.worker_id = :worker_id AND j.status = 'running' AND j.detached_until IS NULL
  AND j.id NOT IN (SELECT json_extract(r.value, '$.id') FROM json_each(:renewals) AS r)
