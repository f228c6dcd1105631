WITH r AS (
    SELECT * FROM (SELECT u.id, coalesce(u.eid, %(reports_eid_all)s::bigint) AS eid, coalesce(u.hp, %(reports_hp_all)s::boolean) AS hp, coalesce(u.pv, %(reports_pv_all)s::float8) AS pv, coalesce(u.ps, %(reports_ps_all)s::text) AS ps, coalesce(u.pm, %(reports_pm_all)s::text) AS pm, coalesce(u.hc, %(reports_hc_all)s::boolean) AS hc, coalesce(u.cp, %(reports_cp_all)s::text) AS cp
    FROM unnest(%(reports_id)s::uuid[], %(reports_eid)s::bigint[], %(reports_hp)s::boolean[], %(reports_pv)s::float8[], %(reports_ps)s::text[], %(reports_pm)s::text[], %(reports_hc)s::boolean[], %(reports_cp)s::text[])
    AS u(id, eid, hp, pv, ps, pm, hc, cp)) AS r ORDER BY id
), locked AS (
    SELECT j.*, r.hp AS r_hp, r.pv AS r_pv, r.ps AS r_ps, r.pm AS r_pm, r.hc AS r_hc, r.cp AS r_cp
    FROM r CROSS JOIN LATERAL (
        SELECT l.job_id AS id, 'running'::text AS status, l.execution_id FROM leases AS l
        WHERE l.job_id = r.id AND l.execution_id = r.eid AND (%(worker_id)s::text IS NULL OR l.worker_id IS NOT DISTINCT FROM %(worker_id)s::text)
        FOR UPDATE OF l
    ) AS j
), beat AS (
    UPDATE leases AS l SET heartbeat_at = coalesce(to_timestamp(%(now)s::float8), now())
    WHERE l.job_id = ANY(ARRAY(SELECT id FROM locked))
)
UPDATE job_documents AS j
SET progress_value = CASE WHEN locked.r_hp THEN locked.r_pv ELSE j.progress_value END,
    progress_stage = CASE WHEN locked.r_hp THEN locked.r_ps ELSE j.progress_stage END,
    progress_message = CASE WHEN locked.r_hp THEN locked.r_pm ELSE j.progress_message END,
    checkpoint = CASE WHEN locked.r_hc THEN locked.r_cp::json ELSE j.checkpoint END,
    updated_at = coalesce(to_timestamp(%(now)s::float8), now())
FROM locked
WHERE j.id = locked.id AND j.id = ANY(ARRAY(SELECT id FROM locked))
RETURNING j.id, locked.execution_id, j.cancel_requested
