WITH snap AS MATERIALIZED (
    SELECT pg_current_snapshot() AS s
), idle AS MATERIALIZED (
    SELECT l.queue, l.priority, l.fair_key
    FROM lanes AS l CROSS JOIN LATERAL (SELECT coalesce(c.frontier_xid, '0'::xid8) AS frontier_xid,
           coalesce(c.frontier_id, '00000000-0000-0000-0000-000000000000'::uuid) AS frontier_id,
           coalesce(c.pending, '{}'::xid8[]) AS pending,
           coalesce(c.pending_after, '{}'::uuid[]) AS pending_after,
           coalesce(c.made_at, '-infinity'::timestamptz) AS made_at
        FROM (SELECT 1) AS one LEFT JOIN LATERAL (
            SELECT c.frontier_xid, c.frontier_id, c.pending, c.pending_after, c.made_at
            FROM claim_marks AS c
            WHERE c.queue = l.queue AND c.priority = l.priority AND c.fair_key = l.fair_key
              AND c.frontier_xid <= pg_snapshot_xmax((SELECT s FROM snap))
            ORDER BY c.frontier_xid DESC, c.frontier_id DESC, c.made_at DESC
            LIMIT 1
        ) AS c ON true) AS m
    WHERE m.made_at < coalesce(to_timestamp(%(now)s::float8), now()) - make_interval(secs => %(idle)s::float8)
)
SELECT queue, priority, fair_key FROM idle
WHERE pg_try_advisory_xact_lock(18508, hashtext(current_schema() || '/' || queue || '/' || priority::text || CASE WHEN fair_key = '' THEN '' ELSE '/' || fair_key END))
