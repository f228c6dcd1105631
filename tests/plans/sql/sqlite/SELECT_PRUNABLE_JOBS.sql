SELECT id FROM heartq_jobs
WHERE status IN ('succeeded', 'cancelled') AND finished_at < :now - :retention
LIMIT :limit
