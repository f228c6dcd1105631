WITH s AS (
    SELECT * FROM json_to_recordset(%(shifts)s::json) AS x(id uuid, holders integer,
                                                            waiting integer)
), locked AS (SELECT j.id FROM job_documents AS j WHERE j.id = ANY(ARRAY(SELECT id FROM s)) ORDER BY j.id FOR UPDATE OF j)
UPDATE job_documents AS j
SET holders = j.holders + s.holders, waiting_for = j.waiting_for + s.waiting,
    status = CASE WHEN j.holders + s.holders > 0 THEN 'blocked' ELSE 'waiting' END,
    updated_at = coalesce(to_timestamp(%(now)s::float8), now())
FROM s JOIN locked ON locked.id = s.id
WHERE j.id = s.id AND j.status IN ('waiting', 'blocked')
RETURNING j.id, j.queue, j.status, j.awaited, j.has_dependents
