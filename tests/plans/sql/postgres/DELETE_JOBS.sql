WITH ends AS (DELETE FROM job_ends WHERE job_id = ANY(%(ids)s::uuid[]))
DELETE FROM job_documents WHERE id = ANY(%(ids)s::uuid[])
