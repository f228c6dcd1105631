DELETE FROM job_documents WHERE id = ANY(%(ids)s::text[])
