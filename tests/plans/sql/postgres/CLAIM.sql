WITH snap AS MATERIALIZED (
    SELECT pg_current_snapshot() AS s
), working AS MATERIALIZED (
    WITH RECURSIVE level(priority, queues) AS (
        SELECT x.priority, array_agg(x.name) FROM (
            SELECT q.name, x.priority, max(x.priority) OVER () AS top
            FROM (SELECT DISTINCT unnest(%(queues)s::text[])) AS q(name) CROSS JOIN LATERAL (
                SELECT l.priority FROM lanes AS l WHERE l.queue = q.name
                ORDER BY l.priority DESC LIMIT 1
            ) AS x
        ) AS x
        WHERE x.priority = x.top
        GROUP BY x.priority
        UNION ALL
        SELECT n.priority, n.queues FROM level CROSS JOIN LATERAL (
            SELECT x.priority, array_agg(x.name) AS queues FROM (
                SELECT q.name, x.priority, max(x.priority) OVER () AS top
                FROM (SELECT DISTINCT unnest(%(queues)s::text[])) AS q(name) CROSS JOIN LATERAL (
                    SELECT l.priority FROM lanes AS l
                    WHERE l.queue = q.name AND l.priority < level.priority
                    ORDER BY l.priority DESC LIMIT 1
                ) AS x
            ) AS x
            WHERE x.priority = x.top
            GROUP BY x.priority
        ) AS n
    )
    SELECT w.* FROM level
    CROSS JOIN LATERAL (
        SELECT w.* FROM unnest(level.queues) AS q(name)
        CROSS JOIN LATERAL (
            SELECT coalesce(c.fair_key, '') AS turn_key, coalesce(c.remaining, 0) AS remaining,
                   CASE WHEN c.fair_key IS NULL THEN ''
                        WHEN c.remaining > 0 THEN c.fair_key
                        ELSE c.fair_key || chr(1) END AS start_key
            FROM (SELECT 1) AS one LEFT JOIN LATERAL (
                SELECT c.fair_key, c.remaining FROM claim_turns AS c
                WHERE c.queue = q.name AND c.priority = level.priority
                ORDER BY c.made_at DESC
                LIMIT 1
            ) AS c ON true
        ) AS t
        CROSS JOIN LATERAL (
            SELECT w.*, t.turn_key, t.remaining,
                   row_number() OVER (ORDER BY w.part, w.fair_key) AS place
            FROM (
                SELECT l.queue, l.priority, l.fair_key, l.part, m.frontier_xid,
                       m.frontier_id, m.pending, m.pending_after, m.made_at,
                       greatest(1, round(coalesce(head.weight, 1)))::int AS quantum
                FROM ((SELECT l.queue, l.priority, l.fair_key, 0 AS part FROM lanes AS l
                       WHERE l.queue = q.name AND l.priority = level.priority
                         AND l.fair_key >= t.start_key
                       ORDER BY l.fair_key)
                      UNION ALL
                      (SELECT l.queue, l.priority, l.fair_key, 1 AS part FROM lanes AS l
                       WHERE t.start_key > '' AND l.queue = q.name
                         AND l.priority = level.priority AND l.fair_key < t.start_key
                       ORDER BY l.fair_key)) AS l
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
                LEFT JOIN LATERAL (
                    SELECT true AS found, j.fair_weight AS weight FROM ready AS j
                    WHERE j.queue = l.queue AND j.priority = l.priority
          AND j.fair_key = l.fair_key
                      AND (j.ready_xid, j.job_id) > (m.frontier_xid, m.frontier_id)
                    ORDER BY j.ready_xid, j.job_id
                    LIMIT 1
                ) AS head ON true
                WHERE head.found OR EXISTS (SELECT 1 FROM unnest(m.pending, m.pending_after) AS p(xid, after)
                   CROSS JOIN LATERAL (
                       SELECT 1 FROM ready AS j
                       WHERE j.queue = l.queue AND j.priority = l.priority
          AND j.fair_key = l.fair_key
                         AND j.ready_xid = p.xid AND j.job_id > p.after
                       LIMIT 1
                   ) AS e
                   WHERE pg_visible_in_snapshot(p.xid, (SELECT s FROM snap)))
                LIMIT %(limit)s
            ) AS w
        ) AS w
        ORDER BY w.place, w.queue
        LIMIT %(limit)s
    ) AS w
    LIMIT %(limit)s
), opening AS MATERIALIZED (
    SELECT w.*, CASE WHEN w.fair_key = w.turn_key AND w.remaining > 0
                     THEN least(w.remaining, w.quantum) ELSE w.quantum END AS opening
    FROM working AS w
), lane AS MATERIALIZED (
    SELECT o.*,
           least(%(limit)s, o.opening + o.quantum * ceil(greatest(0,
               %(limit)s - sum(o.opening) OVER (PARTITION BY o.priority))::float8
               / sum(o.quantum) OVER (PARTITION BY o.priority)))::int AS reach
    FROM opening AS o
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
), further AS MATERIALIZED (
    SELECT e.id, e.queue, e.priority, lane.fair_key, e.fair_weight, e.run_at, e.ready_xid,
           false AS was_pending, e.entry
    FROM (SELECT %(limit)s - (SELECT count(*) FROM pending_taken)
                 - (SELECT count(*) FROM walked) AS short) AS need
    CROSS JOIN lane
    CROSS JOIN LATERAL (
        SELECT count(*) AS taken, max(k.ready_xid) AS last_xid FROM walked AS k
        WHERE k.queue = lane.queue AND k.priority = lane.priority
          AND k.fair_key = lane.fair_key
    ) AS w
    CROSS JOIN LATERAL (
        SELECT (SELECT k.id FROM walked AS k
                WHERE k.queue = lane.queue AND k.priority = lane.priority
                  AND k.fair_key = lane.fair_key AND k.ready_xid = w.last_xid
                ORDER BY k.id DESC LIMIT 1) AS last_id
    ) AS l
    CROSS JOIN LATERAL (
        SELECT j.job_id AS id, j.queue, j.priority, j.fair_weight, j.run_at, j.ready_xid,
               j.ctid AS entry
        FROM ready AS j
        WHERE j.queue = lane.queue AND j.priority = lane.priority
          AND j.fair_key = lane.fair_key
          AND (j.ready_xid, j.job_id) > (lane.frontier_xid, lane.frontier_id)
          AND (j.ready_xid, j.job_id) > (w.last_xid, l.last_id)
          AND j.run_at <= coalesce(to_timestamp(%(now)s::float8), statement_timestamp())
        ORDER BY j.ready_xid, j.job_id
        LIMIT need.short
        FOR UPDATE OF j SKIP LOCKED
    ) AS e
    WHERE need.short > 0 AND w.taken = lane.reach AND lane.reach < %(limit)s
), logged AS MATERIALIZED (
    SELECT * FROM pending_taken
    UNION ALL
    SELECT * FROM walked
    UNION ALL
    SELECT * FROM further
), due AS MATERIALIZED (
    SELECT c.id, c.queue, c.priority, c.run_at, c.fair_key, c.fair_weight
    FROM (SELECT DISTINCT unnest(%(queues)s::text[]) AS name) AS q
    CROSS JOIN LATERAL (
        WITH RECURSIVE level AS (
            (SELECT priority FROM job_documents
             WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
                AND ready_xid IS NULL AND queue = q.name
             ORDER BY priority DESC, run_at, id
             LIMIT 1)
            UNION ALL
            SELECT n.priority FROM level CROSS JOIN LATERAL (
                SELECT priority FROM job_documents
                WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
                AND ready_xid IS NULL AND queue = q.name AND priority < level.priority
                ORDER BY priority DESC, run_at, id
                LIMIT 1
            ) AS n
        )
        SELECT c.* FROM level CROSS JOIN LATERAL (
            SELECT id, queue, priority, run_at, fair_key, fair_weight FROM job_documents
            WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
                AND ready_xid IS NULL AND queue = q.name AND priority = level.priority
              AND run_at <= coalesce(to_timestamp(%(now)s::float8), statement_timestamp())
            ORDER BY run_at, id
            LIMIT %(limit)s
            FOR UPDATE SKIP LOCKED
        ) AS c
        LIMIT %(limit)s
    ) AS c
), picked AS MATERIALIZED (
    SELECT c.id, c.queue, c.priority, c.fair_key, c.fair_weight, c.ready_xid, c.was_pending,
           c.entry, c.turn_key,
           row_number() OVER (PARTITION BY c.queue, c.priority
                              ORDER BY c.round DESC, c.place DESC, c.run_at DESC,
                                       c.id DESC) = 1 AS last_of_tier,
           c.quantum - c.carried
               - count(*) OVER (PARTITION BY c.queue, c.priority, c.fair_key, c.round)
               AS remaining
    FROM (
        SELECT c.*,
               CASE WHEN c.rank <= c.opening THEN c.quantum - c.opening ELSE 0 END AS carried,
               CASE WHEN c.rank <= c.opening THEN 1
                    ELSE 1 + ceil((c.rank - c.opening)::float8 / c.quantum) END AS round
        FROM (
            SELECT c.*, lane.turn_key, coalesce(lane.place, 0) AS place,
                   CASE WHEN lane.fair_key = lane.turn_key AND lane.remaining > 0
                        THEN least(lane.remaining, c.quantum)
                        ELSE c.quantum END AS opening
            FROM (
                SELECT c.*, greatest(1, round(coalesce(c.fair_weight, 1)))::int AS quantum,
                       row_number() OVER (PARTITION BY c.priority, c.fair_key,
                                                       CASE WHEN c.fair_key <> ''
                                                            THEN c.queue END
                                          ORDER BY c.run_at, c.id) AS rank
                FROM (
                    SELECT id, queue, priority, coalesce(fair_key, '') AS fair_key,
                           fair_weight, run_at, NULL::xid8 AS ready_xid, false AS was_pending,
                           NULL::tid AS entry
                    FROM due
                    UNION ALL
                    SELECT id, queue, priority, fair_key, fair_weight, run_at, ready_xid,
                           was_pending, entry
                    FROM logged
                ) AS c
            ) AS c
            LEFT JOIN lane ON lane.queue = c.queue AND lane.priority = c.priority
                          AND lane.fair_key = c.fair_key
        ) AS c
        ORDER BY c.priority DESC, round, c.place, c.run_at, c.id
        LIMIT %(limit)s
    ) AS c
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
), turned AS (
    INSERT INTO claim_turns (queue, priority, fair_key, remaining, made_at)
    SELECT k.queue, k.priority, k.fair_key, k.remaining, coalesce(to_timestamp(%(now)s::float8), statement_timestamp())
    FROM picked AS k
    WHERE k.last_of_tier AND k.turn_key IS NOT NULL AND (k.fair_key, k.turn_key) <> ('', '')
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
