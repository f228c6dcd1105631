SELECT status FROM heartq_jobs WHERE id = :job_id
