INSERT OR IGNORE INTO heartq_pruned_successes (id)
SELECT id FROM heartq_jobs
WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'succeeded'
