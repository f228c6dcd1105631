UPDATE jobs SET result_pending = false, lease_expires_at = NULL, result_lost = %(reason)s,
                updated_at = coalesce(to_timestamp(%(now)s::float8), now())
WHERE id = ANY(ARRAY(SELECT id FROM jobs WHERE result_pending AND lease_expires_at < coalesce(to_timestamp(%(now)s::float8), now())
                     ORDER BY lease_expires_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED))
  AND (result_pending AND lease_expires_at < coalesce(to_timestamp(%(now)s::float8), now())) IS TRUE
RETURNING id, status, awaited
