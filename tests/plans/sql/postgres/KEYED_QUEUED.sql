SELECT EXISTS (SELECT 1 FROM job_documents
               WHERE status = 'queued' AND concurrency_key IS NOT NULL AND rate_key IS NULL
                 AND queue = ANY(%(queues)s::text[]))
    OR EXISTS (SELECT 1 FROM job_documents
               WHERE status = 'queued' AND rate_key IS NOT NULL
                 AND queue = ANY(%(queues)s::text[]))
       AS queued,
       false AS fair
