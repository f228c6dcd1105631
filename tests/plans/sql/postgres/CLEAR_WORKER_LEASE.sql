UPDATE workers SET lease_expires_at = NULL
WHERE id = %(worker_id)s AND (lease_expires_at < coalesce(to_timestamp(%(now)s::float8), now())) IS TRUE
  AND NOT EXISTS (SELECT 1 FROM leases AS j
                  WHERE j.worker_id = %(worker_id)s AND j.detached_until IS NULL)
