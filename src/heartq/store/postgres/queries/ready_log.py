"""The ready log's part of the claim (migrations 0026, 0037, 0038; docs/design/claim.md,
"The claim", and docs/design/limits.md, "Fair shares"): which lanes a claim reads and in
what turn, the entries it walks and locks from each lane's frontier (`logged`, and
`LOGGED_IN_ORDER` for one queue without fairness keys), and the marks and turns it
appends after picking (`MARKED`, `TURNED`). `queries/claim.py` composes them with the due
jobs and the claim's update; the pruner reads `LATEST_MARK` and `HAS_WORK`."""

from __future__ import annotations

from heartq.store.postgres.queries.common import BEFORE_EVERY_JOB_ID, JOB_ID_ARRAY, T_STATEMENT


def _entry_of(lane: str) -> str:
    """`j` is an entry of the ready log (a row of `ready`) in lane `lane` (a row with the
    lane's queue, priority and key): the leading columns of `ready`'s key, so a walk
    under it is of that index."""
    return f"""j.queue = {lane}.queue AND j.priority = {lane}.priority
          AND j.fair_key = {lane}.fair_key"""


def entry_of(entry: str, document: str) -> str:
    """`entry` (a row of `ready`) is the entry of `document` (a job's document, or a row
    with its id, queue, priority, fairness key and `ready_xid`): the entry's whole key,
    which the document keeps (a writer of a queued job finds its entry by it, one probe,
    without an index of its own)."""
    return f"""{entry}.queue = {document}.queue AND {entry}.priority = {document}.priority
          AND {entry}.fair_key = coalesce({document}.fair_key, '')
          AND {entry}.ready_xid = {document}.ready_xid AND {entry}.job_id = {document}.id"""


# An entry of the ready log past its lane's frontier (`lane`), and an entry of a pending
# transaction (`pend`) past the last one of it taken: what a claim walks to take entries,
# and walks again to find the first it did not take (the new frontier; what is left of a
# pending transaction).
_PAST_FRONTIER = f"""{_entry_of("lane")}
          AND (j.ready_xid, j.job_id) > (lane.frontier_xid, lane.frontier_id)"""

_PENDING_LEFT = f"""{_entry_of("pend")}
          AND j.ready_xid = pend.xid AND j.job_id > pend.after"""


# A lane's furthest mark (`l`: a row of `lanes`; `snap`: the claim's snapshot), its
# values where none was made yet: a backward walk of the marks' index, whose newest
# entries are live; a mark past the snapshot's xmax is from another cluster's ids, a
# restore's, and ignored.
LATEST_MARK = f"""SELECT coalesce(c.frontier_xid, '0'::xid8) AS frontier_xid,
           coalesce(c.frontier_id, {BEFORE_EVERY_JOB_ID}) AS frontier_id,
           coalesce(c.pending, '{{}}'::xid8[]) AS pending,
           coalesce(c.pending_after, '{{}}'::{JOB_ID_ARRAY}) AS pending_after,
           coalesce(c.made_at, '-infinity'::timestamptz) AS made_at
        FROM (SELECT 1) AS one LEFT JOIN LATERAL (
            SELECT c.frontier_xid, c.frontier_id, c.pending, c.pending_after, c.made_at
            FROM claim_marks AS c
            WHERE c.queue = l.queue AND c.priority = l.priority AND c.fair_key = l.fair_key
              AND c.frontier_xid <= pg_snapshot_xmax((SELECT s FROM snap))
            ORDER BY c.frontier_xid DESC, c.frontier_id DESC, c.made_at DESC
            LIMIT 1
        ) AS c ON true"""

# Whether lane `l` with its mark `m` has work this snapshot can see: an entry past the
# frontier (`_PAST_WORK`), or an entry of a transaction pending at the mark that has
# ended since (`_PENDING_WORK`: each a probe of its own, LATERAL: a join of the pending
# list with the lane's entries read every entry of the lane from its start).
_PAST_WORK = f"""EXISTS (SELECT 1 FROM ready AS j
                   WHERE {_entry_of("l")}
                     AND (j.ready_xid, j.job_id) > (m.frontier_xid, m.frontier_id))"""

_PENDING_WORK = f"""EXISTS (SELECT 1 FROM unnest(m.pending, m.pending_after) AS p(xid, after)
                   CROSS JOIN LATERAL (
                       SELECT 1 FROM ready AS j
                       WHERE {_entry_of("l")}
                         AND j.ready_xid = p.xid AND j.job_id > p.after
                       LIMIT 1
                   ) AS e
                   WHERE pg_visible_in_snapshot(p.xid, (SELECT s FROM snap)))"""

HAS_WORK = f"({_PAST_WORK}\n        OR {_PENDING_WORK})"

# The claim's probe of a lane's first entry past its frontier: whether it has one, and
# its weight (the lane's quantum, which bounds how far the claim walks the lane).
_HEAD = f"""LEFT JOIN LATERAL (
                    SELECT true AS found, j.fair_weight AS weight FROM ready AS j
                    WHERE {_entry_of("l")}
                      AND (j.ready_xid, j.job_id) > (m.frontier_xid, m.frontier_id)
                    ORDER BY j.ready_xid, j.job_id
                    LIMIT 1
                ) AS head ON true"""


# The walks of a claim's lanes (`lane`: each lane with its mark and its `reach`), as `logged`
# tells below: `pend`, the transactions pending at each lane's mark; `pending_taken`, the
# entries of those that ended, past the last one taken; `walked`, the range past the
# frontier. Each walk locks what it takes (SKIP LOCKED), at most its lane's reach.
_WALKS = f"""pend AS MATERIALIZED (
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
        WHERE {_PENDING_LEFT}
          AND j.run_at <= {T_STATEMENT}
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
        WHERE {_PAST_FRONTIER}
          AND j.run_at <= {T_STATEMENT}
        ORDER BY j.ready_xid, j.job_id
        LIMIT lane.reach
        FOR UPDATE OF j SKIP LOCKED
    ) AS e
"""


# The ready log (migration 0026; docs/design/claim.md, "The claim"): jobs enqueued runnable
# and without a key, in the order of the transactions that enqueued them, lane by lane
# (queue, priority, fairness key: migration 0037). A claim reads each of its lanes from
# the lane's frontier, never from the start: the entries of jobs claimed before it, dead
# but not removable while another session holds the xmin horizon back, are never in its
# way.
#
# `working`: the claim's queues' priorities that have lanes, highest first (`level`: a
# probe of `lanes_pkey` for each queue and priority, recursively, not a walk of the
# lanes, each level with the queues that have it); for each queue of a level (a tier),
# where its turns stand (docs/design/limits.md, "Fair shares"; migration 0038: the key
# whose lane took last and how many jobs its turn has left, from the tier's newest
# `claim_turns` row), then its lanes in rotation from there, after that key (or from it,
# while its turn lasts) and then from the first key up to it (two ordered walks of
# `lanes_pkey`: an `Append` reads its parts in order), each with its furthest mark
# (`LATEST_MARK`) and its first entry past the frontier (`_HEAD`, whose weight is the
# lane's quantum), those with work, at most `limit` in all, the tiers of a level side by
# side by their place in their rotation: a claim reads the lanes whose turn comes next,
# never every key with work; lanes that emptied are passed over, a probe or two each,
# until the pruner removes them (`IDLE_LANES`). `lane`: each lane with what its turn
# opens with and how far the claim walks it (`reach`): as far as its turns could take
# were every lane of its priority full (its opening and its quantum each round the
# claim's slots need), never more than `limit`; what a shorter lane leaves, the others
# take past their reach (`further`). Each entry walked is locked, a WAL record each: 20
# keys' claim of 50 locked 1,000 rows with each lane walked `limit` deep, 120 with twice
# its turns, 60 now. `pend`: the transactions pending at the mark, each
# with the id of its last entry taken and whether this snapshot still sees it running:
# then none of its entries can be visible here, and neither walk probes it (in a fleet
# most pending transactions are claims and finishes in flight; two probes of each at
# every claim cost 40 workers a third of the claim's buffers). `logged`: per lane, the
# first runnable entries no other claim holds, up to its reach, walked in order and
# locked (SKIP LOCKED) as the claim index is walked: those of each pending transaction
# past its last one taken (`pending_taken`), then the range past the frontier (`walked`);
# and when they fall short of the claim's slots (the other lanes of its priority ran
# dry), the lanes walked to their reach go on past it for what is short (`further`). A
# row deleted since this snapshot (another claim took it, a cancel or a re-route removed
# it) cannot be locked, and is passed over: entries are never updated.
def logged(queues: str) -> str:
    """The ready log's CTEs for the queues `queues` names (a query of their names)."""
    return f"""snap AS MATERIALIZED (
    SELECT pg_current_snapshot() AS s
), working AS MATERIALIZED (
    WITH RECURSIVE level(priority, queues) AS (
        SELECT x.priority, array_agg(x.name) FROM (
            SELECT q.name, x.priority, max(x.priority) OVER () AS top
            FROM ({queues}) AS q(name) CROSS JOIN LATERAL (
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
                FROM ({queues}) AS q(name) CROSS JOIN LATERAL (
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
                CROSS JOIN LATERAL ({LATEST_MARK}) AS m
                {_HEAD}
                WHERE head.found OR {_PENDING_WORK}
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
), {_WALKS}), further AS MATERIALIZED (
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
        WHERE {_PAST_FRONTIER}
          AND (j.ready_xid, j.job_id) > (w.last_xid, l.last_id)
          AND j.run_at <= {T_STATEMENT}
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
)"""


def _lanes_with_work(queue: str) -> str:
    """The lanes of `queue` (an SQL expression) at `level.priority` with work, each with
    its mark and its reach, keyed ones first, at most `limit`."""
    return f"""
        SELECT l.queue, l.priority, l.fair_key, m.frontier_xid, m.frontier_id, m.pending,
               m.pending_after, m.made_at, %(limit)s::int AS reach
        FROM lanes AS l
        CROSS JOIN LATERAL ({LATEST_MARK}) AS m
        WHERE l.queue = {queue} AND l.priority = level.priority AND {HAS_WORK}
        ORDER BY l.fair_key DESC
        LIMIT %(limit)s"""


# A claim in order's lanes after `working`: none where one of them has a key (the claim
# then takes nothing and says so), else each walked as `logged`'s are.
_IN_ORDER = f"""keyed_lane AS MATERIALIZED (
    SELECT EXISTS (SELECT 1 FROM working WHERE fair_key <> '') AS found
), lane AS MATERIALIZED (
    SELECT w.* FROM working AS w WHERE NOT (SELECT found FROM keyed_lane)
), {_WALKS}), logged AS MATERIALIZED (
    SELECT * FROM pending_taken
    UNION ALL
    SELECT * FROM walked
)"""

# The ready log of one queue whose lanes have no fairness key (`CLAIM_IN_ORDER`, the
# usual case): the same walks as `logged`'s, without the turns. `working`: the queue's
# priorities that have lanes, highest first (`level`: a probe of `lanes_pkey` each,
# recursively, as `logged` finds them), and each one's lanes with work (`_lanes_with_work`),
# at most `limit` in all; each lane walked as far as `limit` (`reach`: with one lane a
# priority, what `logged`'s turns give it too, so `further` has nothing to add). A
# priority's lanes with a key come before its lane without one, so one with work is met
# first (`keyed_lane`): then `lane` is empty and the claim takes nothing (its caller
# claims again with the turns, `logged`). Written as one walk of the queue's lanes in
# the order of their key, the plan of PostgreSQL's default settings read every lane with
# its mark and sorted them (a claim of 10 over 1,000 priorities: 4,271 buffers, against
# 367 so, and 430 for `logged`'s).
LOGGED_IN_ORDER = f"""snap AS MATERIALIZED (
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
    SELECT w.* FROM level CROSS JOIN LATERAL ({_lanes_with_work("%(queue)s")}
    ) AS w
    LIMIT %(limit)s
), {_IN_ORDER}"""

# The same for a worker of several queues (`CLAIM_QUEUES_IN_ORDER`): a level is a
# priority some of the queues have lanes at, the highest first (each step the highest
# below the last among the queues' next ones, a probe of `lanes_pkey` a queue), and its
# lanes with work are each queue's, keyed ones first across the queues.
LOGGED_QUEUES_IN_ORDER = f"""snap AS MATERIALIZED (
    SELECT pg_current_snapshot() AS s
), working AS MATERIALIZED (
    WITH RECURSIVE level(priority) AS (
        SELECT n.priority FROM (
            SELECT max(x.priority) AS priority
            FROM (SELECT DISTINCT unnest(%(queues)s::text[])) AS q(name)
            CROSS JOIN LATERAL (
                SELECT l.priority FROM lanes AS l WHERE l.queue = q.name
                ORDER BY l.priority DESC LIMIT 1
            ) AS x
        ) AS n
        WHERE n.priority IS NOT NULL
        UNION ALL
        SELECT n.priority FROM level CROSS JOIN LATERAL (
            SELECT max(x.priority) AS priority
            FROM (SELECT DISTINCT unnest(%(queues)s::text[])) AS q(name)
            CROSS JOIN LATERAL (
                SELECT l.priority FROM lanes AS l
                WHERE l.queue = q.name AND l.priority < level.priority
                ORDER BY l.priority DESC LIMIT 1
            ) AS x
        ) AS n
        WHERE n.priority IS NOT NULL
    )
    SELECT w.* FROM level CROSS JOIN LATERAL (
        SELECT w.* FROM (SELECT DISTINCT unnest(%(queues)s::text[])) AS q(name)
        CROSS JOIN LATERAL ({_lanes_with_work("q.name")}
        ) AS w
        ORDER BY w.fair_key DESC
        LIMIT %(limit)s
    ) AS w
    LIMIT %(limit)s
), {_IN_ORDER}"""


# After the claim picked: each lane's new frontier, just before the first entry past the
# old one that this claim did not take (another claim holds it, the limit left it, or it
# is not due yet), or the snapshot's xmax when it took every one it sees (a transaction
# that has not taken an id yet will get one past it). That first entry is found by a
# walk over what this claim took (still queued in its own snapshot): no longer than the
# claim. Pending: each old pending transaction that still runs or has an entry left,
# after its last entry taken; and the transactions running now (pg_snapshot_xip) below
# the new frontier, whose entries become visible when they commit. A mark is appended
# when the claim took from the lane, or at most once a second when only the frontier or
# the pending list changed (every running transaction of the cluster is in the list:
# an idle poll would write one at each claim). Every mark is safe by itself, made from a
# snapshot that saw all it passes; the furthest counts.
MARKED = f"""frontier AS MATERIALIZED (
    SELECT lane.queue, lane.priority, lane.fair_key, lane.frontier_xid AS old_xid,
           lane.frontier_id AS old_id, lane.pending AS old_pending,
           lane.pending_after AS old_after, lane.made_at,
           CASE WHEN b.id IS NULL THEN pg_snapshot_xmax(snap.s)
                ELSE coalesce(t.ready_xid, lane.frontier_xid) END AS frontier_xid,
           CASE WHEN b.id IS NULL THEN {BEFORE_EVERY_JOB_ID}
                ELSE coalesce(t.id, lane.frontier_id) END
               AS frontier_id,
           EXISTS (SELECT 1 FROM picked AS k
                   WHERE k.queue = lane.queue AND k.priority = lane.priority
                     AND k.fair_key = lane.fair_key) AS took
    FROM lane CROSS JOIN snap
    LEFT JOIN LATERAL (
        SELECT j.ready_xid, j.job_id AS id FROM ready AS j
        WHERE {_PAST_FRONTIER}
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
        WHERE NOT pend.running AND {_PENDING_LEFT}
          AND j.job_id NOT IN (SELECT id FROM picked)
        ORDER BY j.job_id
        LIMIT 1
    ) AS b ON true
    WHERE b.id IS NOT NULL OR pend.running
    UNION ALL
    SELECT f.queue, f.priority, f.fair_key, r.xid, {BEFORE_EVERY_JOB_ID}
    FROM frontier AS f CROSS JOIN snap CROSS JOIN LATERAL pg_snapshot_xip(snap.s) AS r(xid)
    WHERE r.xid < f.frontier_xid AND r.xid <> ALL(f.old_pending)
), marked AS (
    INSERT INTO claim_marks (queue, priority, fair_key, frontier_xid, frontier_id, pending,
                             pending_after, made_at)
    SELECT f.queue, f.priority, f.fair_key, f.frontier_xid, f.frontier_id,
           coalesce(p.xids, '{{}}'), coalesce(p.afters, '{{}}'), {T_STATEMENT}
    FROM frontier AS f
    LEFT JOIN LATERAL (
        SELECT array_agg(x.xid ORDER BY x.xid) AS xids,
               array_agg(x.after ORDER BY x.xid) AS afters
        FROM pending AS x
        WHERE x.queue = f.queue AND x.priority = f.priority AND x.fair_key = f.fair_key
    ) AS p ON true
    WHERE f.took
       OR (f.made_at < {T_STATEMENT} - interval '1 second'
           AND ((f.frontier_xid, f.frontier_id) <> (f.old_xid, f.old_id)
                OR coalesce(p.xids, '{{}}') <> f.old_pending
                OR coalesce(p.afters, '{{}}') <> f.old_after))
)"""

# Where the turns of each tier stand after a claim that took turns (`logged`): the lane
# taken from last and what its turn has left.
TURNED = f"""turned AS (
    INSERT INTO claim_turns (queue, priority, fair_key, remaining, made_at)
    SELECT k.queue, k.priority, k.fair_key, k.remaining, {T_STATEMENT}
    FROM picked AS k
    WHERE k.last_of_tier AND k.turn_key IS NOT NULL AND (k.fair_key, k.turn_key) <> ('', '')
)"""
