INSERT INTO pruned_successes (id)
SELECT id FROM job_documents WHERE id = ANY(%(ids)s::uuid[]) AND status = 'succeeded'
UNION ALL
SELECT job_id FROM job_ends WHERE job_id = ANY(%(ids)s::uuid[]) AND status = 'succeeded'
ON CONFLICT DO NOTHING
