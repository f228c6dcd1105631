SELECT id FROM heartq_workers INDEXED BY heartq_workers_lease_idx
WHERE lease_expires_at IS NOT NULL AND lease_expires_at < :now
ORDER BY lease_expires_at
LIMIT :limit
