SELECT EXISTS (
    SELECT 1 FROM heartq_jobs
    WHERE queue IN (SELECT value FROM json_each(:queues))
      AND (status = 'running'
           OR (status = 'queued'
               AND (run_at <= coalesce(:now, (julianday('now') - 2440587.5) * 86400.0)
                    OR (:retries AND (attempts > 0 OR snoozes > 0)))))
) OR EXISTS (
    SELECT 1 FROM heartq_jobs AS w INDEXED BY heartq_jobs_waiting_idx
    JOIN heartq_job_dependencies AS d ON d.job_id = w.id AND d.ended IS NULL
    JOIN heartq_jobs AS e ON e.id = d.depends_on
    WHERE w.status = 'waiting' AND w.queue IN (SELECT value FROM json_each(:queues))
      AND (e.status IN ('running', 'waiting')
           OR (e.status = 'queued'
               AND (e.run_at <= coalesce(:now, (julianday('now') - 2440587.5) * 86400.0)
                    OR (:retries AND (e.attempts > 0 OR e.snoozes > 0)))))
) AS pending
