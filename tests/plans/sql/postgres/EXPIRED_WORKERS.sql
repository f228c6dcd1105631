SELECT id FROM workers
WHERE lease_expires_at < coalesce(to_timestamp(%(now)s::float8), now())
ORDER BY lease_expires_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED
