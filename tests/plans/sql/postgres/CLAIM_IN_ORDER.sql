WITH snap AS MATERIALIZED (
    SELECT pg_current_snapshot() AS s
), working AS MATERIALIZED (
    WITH RECURSIVE level(priority) AS (
        (SELECT l.priority FROM lanes AS l WHERE l.queue = %(queue)s
         ORDER BY l.priority DESC LIMIT 1)
        UNION ALL
        SELECT x.priority FROM level CROSS JOIN LATERAL (
            SELECT l.priority FROM lanes AS l
            WHERE l.queue = %(queue)s AND l.priority < level.priority
            ORDER BY l.priority DESC LIMIT 1
        ) AS x
    )
    SELECT w.* FROM level CROSS JOIN LATERAL (
        SELECT l.queue, l.priority, l.fair_key, m.frontier_xid, m.frontier_id, m.pending,
               m.pending_after, m.made_at, %(limit)s::int AS reach
        FROM lanes AS l
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
        WHERE l.queue = %(queue)s AND l.priority = level.priority AND (EXISTS (SELECT 1 FROM ready AS j
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
        ORDER BY l.fair_key DESC
        LIMIT %(limit)s
    ) AS w
    LIMIT %(limit)s
), keyed_lane AS MATERIALIZED (
    SELECT EXISTS (SELECT 1 FROM working WHERE fair_key <> '') AS found
), lane AS MATERIALIZED (
    SELECT w.* FROM working AS w WHERE NOT (SELECT found FROM keyed_lane)
), pend AS MATERIALIZED (
    SELECT lane.queue, lane.priority, lane.fair_key, lane.reach, p.xid, p.after,
           NOT pg_visible_in_snapshot(p.xid, snap.s) AS running
    FROM lane CROSS JOIN snap
    CROSS JOIN LATERAL unnest(lane.pending, lane.pending_after) AS p(xid, after)
), pending_taken AS MATERIALIZED (
    SELECT e.id, e.queue, e.priority, pend.fair_key, e.fair_weight, e.run_at, e.ready_xid,
           true AS was_pending, e.entry
    FROM pend CROSS JOIN LATERAL (
        SELECT j.job_id AS id, j.queue, j.priority, j.fair_weight, j.run_at, j.ready_xid,
               j.ctid AS entry
        FROM ready AS j
        WHERE j.queue = pend.queue AND j.priority = pend.priority
          AND j.fair_key = pend.fair_key
          AND j.ready_xid = pend.xid AND j.job_id > pend.after
          AND j.run_at <= coalesce(to_timestamp(%(now)s::float8), statement_timestamp())
        ORDER BY j.job_id
        LIMIT pend.reach
        FOR UPDATE OF j SKIP LOCKED
    ) AS e
    WHERE NOT pend.running
), walked AS MATERIALIZED (
    SELECT e.id, e.queue, e.priority, lane.fair_key, e.fair_weight, e.run_at, e.ready_xid,
           false AS was_pending, e.entry
    FROM lane CROSS JOIN LATERAL (
        SELECT j.job_id AS id, j.queue, j.priority, j.fair_weight, j.run_at, j.ready_xid,
               j.ctid AS entry
        FROM ready AS j
        WHERE j.queue = lane.queue AND j.priority = lane.priority
          AND j.fair_key = lane.fair_key
          AND (j.ready_xid, j.job_id) > (lane.frontier_xid, lane.frontier_id)
          AND j.run_at <= coalesce(to_timestamp(%(now)s::float8), statement_timestamp())
        ORDER BY j.ready_xid, j.job_id
        LIMIT lane.reach
        FOR UPDATE OF j SKIP LOCKED
    ) AS e
), logged AS MATERIALIZED (
    SELECT * FROM pending_taken
    UNION ALL
    SELECT * FROM walked
), due AS MATERIALIZED (
        WITH RECURSIVE level AS (
            (SELECT priority FROM job_documents
             WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
                AND ready_xid IS NULL AND queue = %(queue)s
             ORDER BY priority DESC, run_at, id
             LIMIT 1)
            UNION ALL
            SELECT n.priority FROM level CROSS JOIN LATERAL (
                SELECT priority FROM job_documents
                WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
                AND ready_xid IS NULL AND queue = %(queue)s AND priority < level.priority
                ORDER BY priority DESC, run_at, id
                LIMIT 1
            ) AS n
        )
        SELECT c.* FROM level CROSS JOIN LATERAL (
            SELECT id, queue, priority, run_at, fair_key, fair_weight FROM job_documents
            WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
                AND ready_xid IS NULL AND queue = %(queue)s AND priority = level.priority
              AND run_at <= coalesce(to_timestamp(%(now)s::float8), statement_timestamp())
            ORDER BY run_at, id
            LIMIT %(limit)s
            FOR UPDATE SKIP LOCKED
        ) AS c
        LIMIT %(limit)s
), turns_due AS MATERIALIZED (
    SELECT (SELECT found FROM keyed_lane)
           OR EXISTS (SELECT 1 FROM due WHERE fair_key IS NOT NULL) AS found
), picked AS MATERIALIZED (
    SELECT c.id, c.queue, c.priority, c.fair_key, c.ready_xid, c.was_pending, c.entry
    FROM (
        SELECT id, queue, priority, '' AS fair_key, run_at, NULL::xid8 AS ready_xid,
               false AS was_pending, NULL::tid AS entry
        FROM due
        UNION ALL
        SELECT id, queue, priority, fair_key, run_at, ready_xid, was_pending, entry
        FROM logged
    ) AS c
    WHERE NOT (SELECT found FROM turns_due)
    ORDER BY c.priority DESC, c.run_at, c.id
    LIMIT %(limit)s
), frontier AS MATERIALIZED (
    SELECT lane.queue, lane.priority, lane.fair_key, lane.frontier_xid AS old_xid,
           lane.frontier_id AS old_id, lane.pending AS old_pending,
           lane.pending_after AS old_after, lane.made_at,
           CASE WHEN b.id IS NULL THEN pg_snapshot_xmax(snap.s)
                ELSE coalesce(t.ready_xid, lane.frontier_xid) END AS frontier_xid,
           CASE WHEN b.id IS NULL THEN '00000000-0000-0000-0000-000000000000'::uuid
                ELSE coalesce(t.id, lane.frontier_id) END
               AS frontier_id,
           EXISTS (SELECT 1 FROM picked AS k
                   WHERE k.queue = lane.queue AND k.priority = lane.priority
                     AND k.fair_key = lane.fair_key) AS took
    FROM lane CROSS JOIN snap
    LEFT JOIN LATERAL (
        SELECT j.ready_xid, j.job_id AS id FROM ready AS j
        WHERE j.queue = lane.queue AND j.priority = lane.priority
          AND j.fair_key = lane.fair_key
          AND (j.ready_xid, j.job_id) > (lane.frontier_xid, lane.frontier_id)
          AND j.job_id NOT IN (SELECT id FROM picked)
        ORDER BY j.ready_xid, j.job_id
        LIMIT 1
    ) AS b ON true
    LEFT JOIN LATERAL (
        SELECT k.ready_xid, k.id FROM picked AS k
        WHERE NOT k.was_pending AND k.queue = lane.queue AND k.priority = lane.priority
          AND k.fair_key = lane.fair_key AND (k.ready_xid, k.id) < (b.ready_xid, b.id)
        ORDER BY k.ready_xid DESC, k.id DESC
        LIMIT 1
    ) AS t ON true
), pending AS MATERIALIZED (
    SELECT pend.queue, pend.priority, pend.fair_key, pend.xid,
           coalesce((SELECT k.id FROM picked AS k
                     WHERE k.was_pending AND k.ready_xid = pend.xid
                       AND k.queue = pend.queue AND k.priority = pend.priority
                       AND k.fair_key = pend.fair_key
                       AND (b.id IS NULL OR k.id < b.id)
                     ORDER BY k.id DESC LIMIT 1), pend.after) AS after
    FROM pend CROSS JOIN snap
    LEFT JOIN LATERAL (
        SELECT j.job_id AS id FROM ready AS j
        WHERE NOT pend.running AND j.queue = pend.queue AND j.priority = pend.priority
          AND j.fair_key = pend.fair_key
          AND j.ready_xid = pend.xid AND j.job_id > pend.after
          AND j.job_id NOT IN (SELECT id FROM picked)
        ORDER BY j.job_id
        LIMIT 1
    ) AS b ON true
    WHERE b.id IS NOT NULL OR pend.running
    UNION ALL
    SELECT f.queue, f.priority, f.fair_key, r.xid, '00000000-0000-0000-0000-000000000000'::uuid
    FROM frontier AS f CROSS JOIN snap CROSS JOIN LATERAL pg_snapshot_xip(snap.s) AS r(xid)
    WHERE r.xid < f.frontier_xid AND r.xid <> ALL(f.old_pending)
), marked AS (
    INSERT INTO claim_marks (queue, priority, fair_key, frontier_xid, frontier_id, pending,
                             pending_after, made_at)
    SELECT f.queue, f.priority, f.fair_key, f.frontier_xid, f.frontier_id,
           coalesce(p.xids, '{}'), coalesce(p.afters, '{}'), coalesce(to_timestamp(%(now)s::float8), statement_timestamp())
    FROM frontier AS f
    LEFT JOIN LATERAL (
        SELECT array_agg(x.xid ORDER BY x.xid) AS xids,
               array_agg(x.after ORDER BY x.xid) AS afters
        FROM pending AS x
        WHERE x.queue = f.queue AND x.priority = f.priority AND x.fair_key = f.fair_key
    ) AS p ON true
    WHERE f.took
       OR (f.made_at < coalesce(to_timestamp(%(now)s::float8), statement_timestamp()) - interval '1 second'
           AND ((f.frontier_xid, f.frontier_id) <> (f.old_xid, f.old_id)
                OR coalesce(p.xids, '{}') <> f.old_pending
                OR coalesce(p.afters, '{}') <> f.old_after))
), holder AS (
    SELECT lease_expires_at FROM workers WHERE id = %(worker_id)s FOR KEY SHARE
), taken AS (
    DELETE FROM ready WHERE ctid = ANY(ARRAY(SELECT entry FROM picked WHERE entry IS NOT NULL))
), commit_mode AS MATERIALIZED (
    SELECT CASE WHEN statement_timestamp() - pg_postmaster_start_time()
                 >= make_interval(secs => current_setting('heartq.claim_async_after', true)::float8)
            THEN set_config('synchronous_commit', 'off', true) END AS setting
), running AS (
    UPDATE job_documents AS j
    SET status = 'running', started_at = coalesce(to_timestamp(%(now)s::float8), statement_timestamp()), updated_at = coalesce(to_timestamp(%(now)s::float8), statement_timestamp()),
        ready_xid = NULL, progress_value = NULL, progress_stage = NULL, progress_message = NULL
    WHERE j.id = ANY(ARRAY(SELECT id FROM picked WHERE entry IS NULL))
), docs AS MATERIALIZED (
    SELECT j.id, j.task, j.queue, j.args, j.execution_id, j.attempts, j.max_retries,
           j.retry_backoff, j.retry_backoff_max, j.checkpoint, j.run_at, j.priority, j.chosen,
           j.meta, j.dependency_results, j.snoozes, j.expires_at
    FROM job_documents AS j
    WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
), claimed AS (
    INSERT INTO leases (job_id, execution_id, worker_id, attempts, started_at,
                        lease_expires_at, heartbeat_at, detached_until, claimed_ahead)
    SELECT d.id, d.execution_id + 1, %(worker_id)s, d.attempts + 1, coalesce(to_timestamp(%(now)s::float8), statement_timestamp()),
           coalesce(to_timestamp(%(now)s::float8), statement_timestamp()) + make_interval(secs => %(lease)s::float8), coalesce(to_timestamp(%(now)s::float8), statement_timestamp()),
           CASE WHEN (SELECT lease_expires_at FROM holder) IS NULL
                THEN coalesce(to_timestamp(%(now)s::float8), statement_timestamp()) + make_interval(secs => %(lease)s::float8) END,
           %(ahead)s
    FROM docs AS d CROSS JOIN commit_mode
    RETURNING job_id, execution_id, attempts, lease_expires_at
)
SELECT d.id, d.task, d.queue, d.args::text AS args, c.attempts, c.execution_id, d.max_retries,
       d.retry_backoff, d.retry_backoff_max, d.checkpoint::text AS checkpoint,
       extract(epoch from c.lease_expires_at)::float8 AS lease_expires_at,
       extract(epoch from d.run_at)::float8 AS run_at, d.priority, d.chosen,
       d.meta::text AS meta, d.dependency_results, d.snoozes,
       extract(epoch from d.expires_at - coalesce(to_timestamp(%(now)s::float8), statement_timestamp()))::float8 AS expires_in
FROM claimed AS c JOIN docs AS d ON d.id = c.job_id
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL WHERE (SELECT found FROM turns_due)
