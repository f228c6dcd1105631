SELECT EXISTS (SELECT 1 FROM heartq_jobs INDEXED BY heartq_jobs_keyed_claim_idx
               WHERE status = 'queued' AND concurrency_key IS NOT NULL AND rate_key IS NULL
                 AND queue IN (SELECT value FROM json_each(:queues)))
    OR EXISTS (SELECT 1 FROM heartq_jobs INDEXED BY heartq_jobs_rated_claim_idx
               WHERE status = 'queued' AND rate_key IS NOT NULL)
    OR (EXISTS (SELECT 1 FROM heartq_jobs INDEXED BY heartq_jobs_fair_claim_idx
                 WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
                   AND fair_key IS NOT NULL AND fair_tag IS NOT NULL AND queue IN (SELECT value FROM json_each(:queues)))
             OR EXISTS (SELECT 1 FROM heartq_jobs INDEXED BY heartq_jobs_fair_due_idx
                 WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
                   AND fair_key IS NOT NULL AND fair_tag IS NULL AND queue IN (SELECT value FROM json_each(:queues))
                   AND run_at <= :now)) AS queued,
    (EXISTS (SELECT 1 FROM heartq_jobs INDEXED BY heartq_jobs_fair_claim_idx
                 WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
                   AND fair_key IS NOT NULL AND fair_tag IS NOT NULL AND queue IN (SELECT value FROM json_each(:queues)))
             OR EXISTS (SELECT 1 FROM heartq_jobs INDEXED BY heartq_jobs_fair_due_idx
                 WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
                   AND fair_key IS NOT NULL AND fair_tag IS NULL AND queue IN (SELECT value FROM json_each(:queues))
                   AND run_at <= :now)) AS fair,
    EXISTS (SELECT 1 FROM heartq_jobs INDEXED BY heartq_jobs_fair_due_idx
                 WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
                   AND fair_key IS NOT NULL AND fair_tag IS NULL AND queue IN (SELECT value FROM json_each(:queues))
                   AND run_at <= :now) AS untagged
