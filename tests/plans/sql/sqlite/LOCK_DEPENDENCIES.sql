UPDATE heartq_jobs SET has_dependents = 1
WHERE id IN (SELECT value FROM json_each(:ids)) AND NOT has_dependents;
SELECT id, status FROM heartq_jobs WHERE id IN (SELECT value FROM json_each(:ids))
