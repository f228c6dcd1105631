UPDATE heartq_jobs AS j INDEXED BY sqlite_autoindex_heartq_jobs_1
SET progress_value = CASE WHEN json_extract(r.value, '$.hp')
                          THEN json_extract(r.value, '$.pv') ELSE j.progress_value END,
    progress_stage = CASE WHEN json_extract(r.value, '$.hp')
                          THEN json_extract(r.value, '$.ps') ELSE j.progress_stage END,
    progress_message = CASE WHEN json_extract(r.value, '$.hp')
                            THEN json_extract(r.value, '$.pm') ELSE j.progress_message END,
    checkpoint = CASE WHEN json_extract(r.value, '$.hc')
                      THEN json_extract(r.value, '$.cp') ELSE j.checkpoint END,
    heartbeat_at = :now,
    updated_at = :now
FROM json_each(:reports) AS r
WHERE j.id = json_extract(r.value, '$.id')
  AND j.execution_id = json_extract(r.value, '$.eid') AND (:worker_id IS NULL OR j.worker_id = :worker_id)
  AND j.status = 'running'
RETURNING id, execution_id, cancel_requested
