UPDATE job_documents AS j
SET result_pending = false, lease_expires_at = NULL, detached_until = NULL,
                     result_lost = %(reason)s, updated_at = coalesce(to_timestamp(%(now)s::float8), now())
WHERE j.id = ANY(ARRAY(SELECT j.id FROM job_documents AS j WHERE (j.result_pending AND j.lease_expires_at < coalesce(to_timestamp(%(now)s::float8), now())
       AND coalesce(j.detached_until, greatest(j.lease_expires_at, (
               SELECT w.lease_expires_at FROM workers AS w WHERE w.id = j.worker_id LIMIT 1
           ))) < coalesce(to_timestamp(%(now)s::float8), now()))
                       ORDER BY j.lease_expires_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED))
  AND (j.result_pending AND j.lease_expires_at < coalesce(to_timestamp(%(now)s::float8), now())
       AND coalesce(j.detached_until, greatest(j.lease_expires_at, (
               SELECT w.lease_expires_at FROM workers AS w WHERE w.id = j.worker_id LIMIT 1
           ))) < coalesce(to_timestamp(%(now)s::float8), now())) IS TRUE
RETURNING j.id, j.status, j.awaited
