UPDATE heartq_jobs AS j INDEXED BY sqlite_autoindex_heartq_jobs_1
SET claimed_ahead = 0,
    started_at = :now,
    heartbeat_at = :now,
    lease_expires_at = :now + :lease,
    detached_until = CASE WHEN j.detached_until IS NOT NULL
                          THEN max(j.detached_until, :now + :lease) END,
    updated_at = :now
FROM json_each(:leases) AS s
WHERE j.id = json_extract(s.value, '$.id')
  AND j.execution_id = json_extract(s.value, '$.eid') AND (:worker_id IS NULL OR j.worker_id = :worker_id)
  AND j.status = 'running' AND j.claimed_ahead AND NOT j.cancel_requested
RETURNING id, execution_id
