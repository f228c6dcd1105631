UPDATE heartq_jobs SET result_pending = 0, lease_expires_at = NULL, result_lost = :reason,
                       updated_at = :now
WHERE id IN (SELECT id FROM heartq_jobs INDEXED BY heartq_jobs_pending_result_idx
             WHERE result_pending AND lease_expires_at < :now
             ORDER BY lease_expires_at LIMIT :limit)
RETURNING id, status, awaited
