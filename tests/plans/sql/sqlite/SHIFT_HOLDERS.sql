UPDATE heartq_jobs AS j
SET holders = j.holders + s.holders, waiting_for = j.waiting_for + s.waiting,
    status = CASE WHEN j.holders + s.holders > 0 THEN 'blocked' ELSE 'waiting' END,
    updated_at = :now
FROM (
    SELECT json_extract(x.value, '$.id') AS id, json_extract(x.value, '$.holders') AS holders,
           json_extract(x.value, '$.waiting') AS waiting
    FROM json_each(:shifts) AS x
) AS s
WHERE j.id = s.id AND j.status IN ('waiting', 'blocked')
RETURNING id, queue, status, awaited, has_dependents
