UPDATE heartq_jobs SET result_pending = 0, lease_expires_at = NULL, detached_until = NULL,
                       result_lost = :reason, updated_at = :now
WHERE id IN (SELECT j.id FROM heartq_jobs AS j INDEXED BY heartq_jobs_pending_result_idx
             WHERE j.result_pending AND j.lease_expires_at < :now
               AND coalesce(j.detached_until, max(j.lease_expires_at, coalesce(
                       (SELECT w.lease_expires_at FROM heartq_workers AS w
                        WHERE w.id = j.worker_id), j.lease_expires_at))) < :now
             ORDER BY j.lease_expires_at LIMIT :limit)
RETURNING id, status, awaited
