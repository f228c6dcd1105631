DELETE FROM heartq_jobs WHERE id IN (SELECT value FROM json_each(:ids))
