UPDATE heartq_workers SET lease_expires_at = NULL
WHERE id = :worker_id AND lease_expires_at < :now
  AND NOT EXISTS (SELECT 1 FROM heartq_jobs AS j INDEXED BY heartq_jobs_worker_idx
                  WHERE j.worker_id = :worker_id AND j.status = 'running'
                    AND j.detached_until IS NULL)
