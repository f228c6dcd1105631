-- The one walk's claim, a prototype (fair-turns.md, "The one walk, measured"; run by
-- fair-one-walk-experiment.py beside it, which puts in the parts marked /*...*/ from the
-- golden SQL of CLAIM_QUEUES_IN_ORDER): the tiers of the queues claimed (each queue's
-- priorities with a lane, highest first), each tier's entries in one lane with start
-- tags, its mark a row of tier_marks. Not heartq's SQL.
WITH snap AS MATERIALIZED (
    SELECT pg_current_snapshot() AS s
), m AS MATERIALIZED (
    -- each tier's furthest mark, read whole: the arrival frontier A with its pending list
    -- (transactions below A that were running, each with its last entry handled), and
    -- the service position Q; the tiers are the queues' priorities that have a lane, the
    -- highest first (each step the highest below the last among the queues' next ones, a
    -- probe of `lanes` a queue)
/*LEVELS: CLAIM_QUEUES_IN_ORDER's `level`, put in by fair-one-walk-experiment.py*/
    SELECT q.name AS queue, level.priority,
           coalesce(c.frontier_xid, '0'::xid8) AS fx,
           coalesce(c.frontier_id, '00000000-0000-0000-0000-000000000000'::uuid) AS fid,
           coalesce(c.pending, '{}'::xid8[]) AS pending,
           coalesce(c.pending_after, '{}'::uuid[]) AS pending_after,
           coalesce(c.service_tag, '-infinity'::float8) AS qt,
           coalesce(c.service_id, '00000000-0000-0000-0000-000000000000'::uuid) AS qid
    FROM level
    CROSS JOIN (SELECT DISTINCT unnest(%(queues)s::text[])) AS q(name)
    LEFT JOIN LATERAL (
        SELECT c.* FROM tier_marks AS c
        WHERE c.queue = q.name AND c.priority = level.priority
          AND c.frontier_xid <= pg_snapshot_xmax((SELECT s FROM snap))
        ORDER BY c.frontier_xid DESC, c.frontier_id DESC, c.made_at DESC
        LIMIT 1
    ) AS c ON true
    WHERE EXISTS (SELECT 1 FROM lanes AS l WHERE l.queue = q.name AND l.priority = level.priority)
), pend AS MATERIALIZED (
    SELECT m.queue, m.priority, p.xid, p.after,
           NOT pg_visible_in_snapshot(p.xid, snap.s) AS running
    FROM m CROSS JOIN snap CROSS JOIN LATERAL unnest(m.pending, m.pending_after) AS p(xid, after)
), arrived AS MATERIALIZED (
    -- the arrival walk of each tier, not locked, at most twice the slots each: the entries
    -- of each pending transaction that has ended, past its last one handled, and the
    -- entries past A, in arrival order. An entry is late if its place in the turns is
    -- behind Q (or it has none): re-tagged; the others are passed (left for the tag walk)
    SELECT e.*, e.fair_tag IS NULL OR (e.fair_tag, e.job_id) <= (m.qt, m.qid) AS late
    FROM m JOIN (
        SELECT pend.queue, pend.priority, pend.xid AS pending_xid, j.job_id, j.ready_xid,
               j.fair_tag, j.ctid AS entry
        FROM pend CROSS JOIN LATERAL (
            SELECT j.job_id, j.ready_xid, j.fair_tag, j.ctid FROM ready AS j
            WHERE j.queue = pend.queue AND j.priority = pend.priority AND j.fair_key = ''
              AND j.ready_xid = pend.xid AND j.job_id > pend.after
            ORDER BY j.job_id
            LIMIT 2 * %(limit)s
        ) AS j
        WHERE NOT pend.running
        UNION ALL
        SELECT m.queue, m.priority, NULL, j.job_id, j.ready_xid, j.fair_tag, j.entry
        FROM m CROSS JOIN LATERAL (
            SELECT j.job_id, j.ready_xid, j.fair_tag, j.ctid AS entry FROM ready AS j
            WHERE j.queue = m.queue AND j.priority = m.priority AND j.fair_key = ''
              AND (j.ready_xid, j.job_id) > (m.fx, m.fid)
            ORDER BY j.ready_xid, j.job_id
            LIMIT 2 * %(limit)s
        ) AS j
    ) AS e ON (e.queue, e.priority) = (m.queue, m.priority)
), late AS MATERIALIZED (
    -- the late entries this claim holds: re-tagged below
    SELECT j.job_id AS id, j.queue, j.priority, j.run_at, j.fair_weight, j.ctid AS entry,
           greatest(coalesce(j.fair_tag - j.tag_base, 0), 0) AS ahead
    FROM ready AS j
    WHERE j.ctid = ANY(ARRAY(SELECT entry FROM arrived WHERE late))
    FOR UPDATE OF j SKIP LOCKED
), served AS MATERIALIZED (
    -- each tier's tag walk from its Q, the slots at most each; a tag less its tier's Q
    -- (`rel`) orders the tiers of several queues side by side
    SELECT e.id, m.queue, m.priority, e.fair_tag, e.fair_tag - greatest(m.qt, 0) AS rel,
           e.ready_xid, e.entry, 1 AS part
    FROM m CROSS JOIN LATERAL (
        SELECT j.job_id AS id, j.fair_tag, j.ready_xid, j.ctid AS entry FROM ready AS j
        WHERE j.queue = m.queue AND j.priority = m.priority AND j.fair_tag IS NOT NULL
          AND (j.fair_tag, j.job_id) > (m.qt, m.qid)
          AND j.run_at <= coalesce(to_timestamp(%(now)s::float8), statement_timestamp())
        ORDER BY j.fair_tag, j.job_id
        LIMIT %(limit)s
        FOR UPDATE OF j SKIP LOCKED
    ) AS e
/*DUE: CLAIM_QUEUES_IN_ORDER's `due`, put in by fair-one-walk-experiment.py*/
), picked AS MATERIALIZED (
    -- the highest priority first, then by tag less its tier's Q; the due jobs outside the
    -- ready log
    -- (delayed, retried) would be tagged here (max(V, F) of their key) and merged by tag:
    -- in this experiment none is due, and the walk that finds them is the claim in
    -- order's, for its cost
    SELECT x.id, x.queue, x.priority, x.fair_tag, x.ready_xid, x.entry, x.part
    FROM (SELECT * FROM served
          UNION ALL SELECT d.id, d.queue, d.priority, NULL, NULL, NULL, NULL, 2 FROM due AS d)
        AS x
    ORDER BY x.priority DESC, x.part, x.rel, x.id
    LIMIT %(limit)s
), q_new AS MATERIALIZED (
    -- each tier's Q moves to the last entry its tag walk took before the first entry past
    -- Q, in tag order, that this claim sees and did not take (to all it took, if none)
    SELECT m.queue, m.priority, coalesce(t.fair_tag, m.qt) AS qt, coalesce(t.id, m.qid) AS qid
    FROM m LEFT JOIN LATERAL (
        SELECT j.fair_tag, j.job_id FROM ready AS j
        WHERE j.queue = m.queue AND j.priority = m.priority AND j.fair_tag IS NOT NULL
          AND (j.fair_tag, j.job_id) > (m.qt, m.qid)
          AND j.job_id NOT IN (SELECT id FROM picked)
        ORDER BY j.fair_tag, j.job_id
        LIMIT 1
    ) AS b ON true
    LEFT JOIN LATERAL (
        SELECT k.fair_tag, k.id FROM picked AS k
        WHERE k.part = 1 AND (k.queue, k.priority) = (m.queue, m.priority)
          AND (b.job_id IS NULL OR (k.fair_tag, k.id) < (b.fair_tag, b.job_id))
        ORDER BY k.fair_tag DESC, k.id DESC
        LIMIT 1
    ) AS t ON true
), missed AS MATERIALIZED (
    -- the entries the arrival walks saw and neither re-tagged nor passed: late ones
    -- another claim holds
    SELECT a.queue, a.priority, a.pending_xid, a.ready_xid, a.job_id FROM arrived AS a
    WHERE a.late AND a.job_id NOT IN (SELECT id FROM late)
), a_new AS MATERIALIZED (
    -- each tier's A moves to just before the first entry past it that its walk missed,
    -- else to the last one it walked if it stopped at its bound, else to the snapshot's
    -- xmax
    SELECT m.queue, m.priority,
           CASE WHEN f.job_id IS NOT NULL THEN coalesce(b.ready_xid, m.fx)
                WHEN w.n >= 2 * %(limit)s THEN l.ready_xid
                ELSE pg_snapshot_xmax(snap.s) END AS fx,
           CASE WHEN f.job_id IS NOT NULL THEN coalesce(b.job_id, m.fid)
                WHEN w.n >= 2 * %(limit)s THEN l.job_id
                ELSE '00000000-0000-0000-0000-000000000000'::uuid END AS fid
    FROM m CROSS JOIN snap
    CROSS JOIN LATERAL (
        SELECT count(*) AS n FROM arrived AS a
        WHERE (a.queue, a.priority) = (m.queue, m.priority) AND a.pending_xid IS NULL
    ) AS w
    LEFT JOIN LATERAL (
        SELECT x.ready_xid, x.job_id FROM missed AS x
        WHERE (x.queue, x.priority) = (m.queue, m.priority) AND x.pending_xid IS NULL
        ORDER BY x.ready_xid, x.job_id LIMIT 1
    ) AS f ON true
    LEFT JOIN LATERAL (
        SELECT a.ready_xid, a.job_id FROM arrived AS a
        WHERE (a.queue, a.priority) = (m.queue, m.priority) AND a.pending_xid IS NULL
          AND (a.ready_xid, a.job_id) < (f.ready_xid, f.job_id)
        ORDER BY a.ready_xid DESC, a.job_id DESC LIMIT 1
    ) AS b ON true
    LEFT JOIN LATERAL (
        SELECT a.ready_xid, a.job_id FROM arrived AS a
        WHERE (a.queue, a.priority) = (m.queue, m.priority) AND a.pending_xid IS NULL
        ORDER BY a.ready_xid DESC, a.job_id DESC LIMIT 1
    ) AS l ON true
), pending_new AS MATERIALIZED (
    -- per tier: a pending transaction still running stays as it was; one that ended stays
    -- while the walk missed one of its entries (after the last one before it) or stopped
    -- at its bound (after the last one walked); the transactions running below the new A
    -- join
    SELECT p.queue, p.priority, p.xid,
           CASE WHEN p.running THEN p.after
                WHEN x.job_id IS NOT NULL
                THEN coalesce((SELECT a.job_id FROM arrived AS a
                               WHERE (a.queue, a.priority) = (p.queue, p.priority) AND a.pending_xid = p.xid
                                 AND a.job_id < x.job_id
                               ORDER BY a.job_id DESC LIMIT 1), p.after)
                ELSE (SELECT a.job_id FROM arrived AS a
                      WHERE (a.queue, a.priority) = (p.queue, p.priority) AND a.pending_xid = p.xid
                      ORDER BY a.job_id DESC LIMIT 1) END
               AS after
    FROM pend AS p
    LEFT JOIN LATERAL (
        SELECT x.job_id FROM missed AS x
        WHERE (x.queue, x.priority) = (p.queue, p.priority) AND x.pending_xid = p.xid
        ORDER BY x.job_id LIMIT 1
    ) AS x ON true
    WHERE p.running OR x.job_id IS NOT NULL
       OR (SELECT count(*) FROM arrived AS a
           WHERE (a.queue, a.priority) = (p.queue, p.priority) AND a.pending_xid = p.xid) >= 2 * %(limit)s
    UNION ALL
    SELECT a_new.queue, a_new.priority, r.xid, '00000000-0000-0000-0000-000000000000'::uuid
    FROM snap CROSS JOIN a_new CROSS JOIN LATERAL pg_snapshot_xip(snap.s) AS r(xid)
    WHERE r.xid < a_new.fx
      AND NOT EXISTS (SELECT 1 FROM pend WHERE (pend.queue, pend.priority)
                                               = (a_new.queue, a_new.priority)
                                          AND pend.xid = r.xid)
), marked AS (
    -- a mark for each tier whose positions or pending list moved, or that gave jobs
    INSERT INTO tier_marks (queue, priority, frontier_xid, frontier_id, pending, pending_after,
                            service_tag, service_id, made_at)
    SELECT m.queue, m.priority, a.fx, a.fid, coalesce(p.xids, '{}'), coalesce(p.afters, '{}'),
           q.qt, q.qid, coalesce(to_timestamp(%(now)s::float8), statement_timestamp())
    FROM m JOIN a_new AS a ON (a.queue, a.priority) = (m.queue, m.priority)
    JOIN q_new AS q ON (q.queue, q.priority) = (m.queue, m.priority)
    LEFT JOIN LATERAL (
        SELECT array_agg(x.xid ORDER BY x.xid) AS xids, array_agg(x.after ORDER BY x.xid) AS afters
        FROM pending_new AS x WHERE (x.queue, x.priority) = (m.queue, m.priority)
    ) AS p ON true
    WHERE EXISTS (SELECT 1 FROM picked AS k
                  WHERE (k.queue, k.priority) = (m.queue, m.priority))
       OR (a.fx, a.fid) <> (m.fx, m.fid) OR (q.qt, q.qid) <> (m.qt, m.qid)
       OR coalesce(p.xids, '{}') <> m.pending OR coalesce(p.afters, '{}') <> m.pending_after
), retagged AS (
    -- the late entries held, re-tagged: deleted, and inserted again under this claim's
    -- transaction id (past the new arrival frontier), at their tier's service position
    -- plus how far past its enqueue's position each was (a hair past, so never behind it)
    DELETE FROM ready WHERE ctid = ANY(ARRAY(SELECT entry FROM late))
), reentered AS (
    INSERT INTO ready (queue, priority, fair_key, ready_xid, job_id, run_at, fair_weight,
                       fair_tag, tag_base)
    SELECT l.queue, l.priority, '', pg_current_xact_id(), l.id, l.run_at, l.fair_weight,
           greatest(m.qt, 0) + l.ahead + 1e-6, greatest(m.qt, 0)
    FROM late AS l JOIN m ON (m.queue, m.priority) = (l.queue, l.priority)
/*CLAIMED: CLAIM_QUEUES_IN_ORDER's, from its `holder` on, put in by fair-one-walk-experiment.py*/
