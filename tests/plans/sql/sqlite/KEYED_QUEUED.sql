WITH k AS MATERIALIZED (
    SELECT EXISTS (SELECT 1 FROM heartq_jobs INDEXED BY heartq_jobs_keyed_claim_idx
                   WHERE status = 'queued' AND concurrency_key IS NOT NULL
                     AND rate_key IS NULL AND queue IN (SELECT value FROM json_each(:queues)))
        OR EXISTS (SELECT 1 FROM heartq_jobs INDEXED BY heartq_jobs_rated_claim_idx
                   WHERE status = 'queued' AND rate_key IS NOT NULL AND queue IN (SELECT value FROM json_each(:queues))) AS keyed,
        EXISTS (SELECT 1 FROM heartq_jobs INDEXED BY heartq_jobs_fair_claim_idx
                 WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
                   AND fair_key IS NOT NULL AND fair_tag IS NOT NULL AND queue IN (SELECT value FROM json_each(:queues))) AS tagged,
        EXISTS (SELECT 1 FROM heartq_jobs INDEXED BY heartq_jobs_fair_due_idx
                 WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
                   AND fair_key IS NOT NULL AND fair_tag IS NULL AND queue IN (SELECT value FROM json_each(:queues))
                   AND run_at <= :now) AS untagged
)
SELECT keyed OR tagged OR untagged AS queued, tagged OR untagged AS fair, untagged,
       CASE WHEN tagged AND NOT untagged
            THEN NOT EXISTS (SELECT 1 FROM heartq_jobs INDEXED BY heartq_jobs_claim_idx
                             WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
      AND fair_key IS NULL AND queue IN (SELECT value FROM json_each(:queues)))
            ELSE false END AS line
FROM k
