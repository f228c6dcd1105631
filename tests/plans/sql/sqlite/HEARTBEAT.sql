UPDATE heartq_jobs AS j INDEXED BY sqlite_autoindex_heartq_jobs_1
SET detached_until = CASE WHEN json_extract(r.value, '$.dt') THEN max(j.lease_expires_at, coalesce(
        (SELECT w.lease_expires_at FROM heartq_workers AS w WHERE w.id = :worker_id),
        j.lease_expires_at))
                          WHEN EXISTS (SELECT 1 FROM heartq_workers AS w WHERE w.id = :worker_id) THEN NULL ELSE :now + :lease END,
    heartbeat_at = CASE WHEN json_extract(r.value, '$.dt') THEN max(j.heartbeat_at, coalesce(
        (SELECT w.last_heartbeat_at FROM heartq_workers AS w WHERE w.id = :worker_id),
        j.heartbeat_at))
                        WHEN EXISTS (SELECT 1 FROM heartq_workers AS w WHERE w.id = :worker_id) THEN j.heartbeat_at ELSE :now END,
    updated_at = :now,
    progress_value = CASE WHEN json_extract(r.value, '$.hp')
                          THEN json_extract(r.value, '$.pv') ELSE j.progress_value END,
    progress_stage = CASE WHEN json_extract(r.value, '$.hp')
                          THEN json_extract(r.value, '$.ps') ELSE j.progress_stage END,
    progress_message = CASE WHEN json_extract(r.value, '$.hp')
                            THEN json_extract(r.value, '$.pm') ELSE j.progress_message END
FROM json_each(:renewals) AS r
WHERE j.id = json_extract(r.value, '$.id')
  AND j.execution_id = json_extract(r.value, '$.eid') AND (:worker_id IS NULL OR j.worker_id = :worker_id)
  AND j.status = 'running'
  AND CASE WHEN json_extract(r.value, '$.dt') THEN j.detached_until IS NULL
           ELSE json_extract(r.value, '$.hp') OR j.detached_until IS NOT NULL
                OR NOT EXISTS (SELECT 1 FROM heartq_workers AS w WHERE w.id = :worker_id) END;
UPDATE heartq_workers SET last_heartbeat_at = :now, status = 'active', stopped_at = NULL,
    contact_since = CASE WHEN last_heartbeat_at < :now - stale_after / 2
                         THEN :now ELSE coalesce(contact_since, started_at) END,
    lease_expires_at = :now + :lease
WHERE id = :worker_id;
SELECT j.id, j.execution_id, j.cancel_requested
FROM json_each(:renewals) AS r
JOIN heartq_jobs AS j INDEXED BY sqlite_autoindex_heartq_jobs_1
  ON j.id = json_extract(r.value, '$.id')
WHERE NOT json_extract(r.value, '$.dt')
  AND j.execution_id = json_extract(r.value, '$.eid') AND (:worker_id IS NULL OR j.worker_id = :worker_id)
  AND j.status = 'running'
