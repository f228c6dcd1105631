WITH snap AS MATERIALIZED (
    SELECT pg_current_snapshot() AS s
), empty AS MATERIALIZED (
    SELECT l.queue, l.priority, l.fair_key
    FROM unnest(%(queues)s::text[], %(priorities)s::integer[], %(keys)s::text[])
        AS l(queue, priority, fair_key)
    CROSS JOIN LATERAL (SELECT coalesce(c.frontier_xid, '0'::xid8) AS frontier_xid,
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
    WHERE NOT (EXISTS (SELECT 1 FROM ready AS j
                   WHERE j.queue = l.queue AND j.priority = l.priority
          AND j.fair_key = l.fair_key
                     AND (j.ready_xid, j.job_id) > (m.frontier_xid, m.frontier_id))
        OR EXISTS (SELECT 1 FROM unnest(m.pending, m.pending_after) AS p(xid, after)
                   CROSS JOIN LATERAL (
                       SELECT 1 FROM ready AS j
                       WHERE j.queue = l.queue AND j.priority = l.priority
          AND j.fair_key = l.fair_key
                         AND j.ready_xid = p.xid AND j.job_id > p.after
                       LIMIT 1
                   ) AS e
                   WHERE pg_visible_in_snapshot(p.xid, (SELECT s FROM snap))))
)
DELETE FROM lanes AS l USING empty AS e
WHERE l.queue = e.queue AND l.priority = e.priority AND l.fair_key = e.fair_key
