WITH prior AS MATERIALIZED (
    SELECT lease_expires_at, last_heartbeat_at FROM workers WHERE id = %(worker_id)s
), touched AS (
    UPDATE workers SET last_heartbeat_at = coalesce(to_timestamp(%(now)s::float8), now()), status = 'active', stopped_at = NULL,
        contact_since = CASE WHEN last_heartbeat_at < coalesce(to_timestamp(%(now)s::float8), now()) - make_interval(secs => stale_after / 2)
        THEN coalesce(to_timestamp(%(now)s::float8), now()) ELSE coalesce(contact_since, started_at) END, lease_expires_at = coalesce(to_timestamp(%(now)s::float8), now()) + make_interval(secs => %(lease)s::float8)
    WHERE id = %(worker_id)s
    RETURNING id
), r AS (
    SELECT * FROM (SELECT u.id, coalesce(u.eid, %(renewals_eid_all)s::bigint) AS eid, coalesce(u.hp, %(renewals_hp_all)s::boolean) AS hp, coalesce(u.pv, %(renewals_pv_all)s::float8) AS pv, coalesce(u.ps, %(renewals_ps_all)s::text) AS ps, coalesce(u.pm, %(renewals_pm_all)s::text) AS pm, coalesce(u.dt, %(renewals_dt_all)s::boolean) AS dt
    FROM unnest(%(renewals_id)s::uuid[], %(renewals_eid)s::bigint[], %(renewals_hp)s::boolean[], %(renewals_pv)s::float8[], %(renewals_ps)s::text[], %(renewals_pm)s::text[], %(renewals_dt)s::boolean[])
    AS u(id, eid, hp, pv, ps, pm, dt)) AS r ORDER BY id
), locked AS (
    SELECT j.*, r.hp AS r_hp, r.pv AS r_pv, r.ps AS r_ps, r.pm AS r_pm, r.dt AS r_dt
    FROM r CROSS JOIN LATERAL (
        SELECT l.job_id AS id, 'running'::text AS status, l.execution_id, l.detached_until, d.cancel_requested FROM leases AS l JOIN job_documents AS d ON d.id = l.job_id
        WHERE l.job_id = r.id AND l.execution_id = r.eid AND (%(worker_id)s::text IS NULL OR l.worker_id IS NOT DISTINCT FROM %(worker_id)s::text)
        FOR UPDATE OF l
    ) AS j
), renewed AS (
    UPDATE leases AS l
    SET detached_until = CASE WHEN EXISTS (SELECT 1 FROM touched) THEN NULL
                              ELSE coalesce(to_timestamp(%(now)s::float8), now()) + make_interval(secs => %(lease)s::float8) END,
        heartbeat_at = CASE WHEN EXISTS (SELECT 1 FROM touched) THEN l.heartbeat_at
                            ELSE coalesce(to_timestamp(%(now)s::float8), now()) END
    WHERE l.job_id = ANY(ARRAY(
        SELECT id FROM locked
        WHERE NOT r_dt AND (detached_until IS NOT NULL OR NOT EXISTS (SELECT 1 FROM touched))))
), progressed AS (
    UPDATE job_documents AS j
    SET updated_at = coalesce(to_timestamp(%(now)s::float8), now()),
        progress_value = CASE WHEN locked.r_hp THEN locked.r_pv ELSE j.progress_value END,
    progress_stage = CASE WHEN locked.r_hp THEN locked.r_ps ELSE j.progress_stage END,
    progress_message = CASE WHEN locked.r_hp THEN locked.r_pm ELSE j.progress_message END
    FROM locked
    WHERE j.id = locked.id AND j.id = ANY(ARRAY(SELECT id FROM locked))
      AND NOT locked.r_dt AND locked.r_hp
), detached AS (
    UPDATE leases AS l
    SET detached_until = greatest(l.lease_expires_at, (SELECT lease_expires_at FROM prior)),
        heartbeat_at = greatest(l.heartbeat_at, (SELECT last_heartbeat_at FROM prior))
    WHERE l.job_id = ANY(ARRAY(SELECT id FROM locked WHERE r_dt AND detached_until IS NULL))
)
SELECT id, execution_id, cancel_requested FROM locked
WHERE status = 'running' AND NOT r_dt
