"""The claim: runnable jobs put under a worker's lease, each as a new execution. Plain
jobs (`CLAIM`, `CLAIM_ONE_QUEUE`, a transport's `CLAIM_IDS`), then jobs with a
concurrency key, then jobs with a rate key, and how long a rate limit holds jobs back
(`RATE_WAIT`)."""

from __future__ import annotations

from heartq.store.postgres.queries.common import (
    CONCURRENCY_NAMESPACE,
    RATE_NAMESPACE,
    RATE_STARTS,
    T_STATEMENT,
    _secs,
)

# Each queue's best runnable jobs come from its own ordered walk of the claim index
# (`LATERAL`, one per queue): `queue = ANY(...)` with this ORDER BY would read and sort
# every queued row of those queues at each claim, so the claim would slow down with the
# backlog. Up to `limit` rows per queue are locked and the best `limit` of them taken;
# the others are unlocked when the claim commits, milliseconds later.
# What every claim does with the jobs it `picked` (a CTE of ids before this): they run
# under a new execution. The running attempt lives on the job row alone (worker_id,
# execution_id, started_at, rate_key): its execution row is written once, complete, by
# the statement that ends it (FINISH, RELEASE), and the `executions` view shows it open
# meanwhile (migration 0017).
#
# The attempt's lease is its worker's (docs/design/leases.md, "Leases and heartbeats"): the row's
# `lease_expires_at` is its floor, never renewed. The worker's row is read `FOR KEY SHARE`
# (a heartbeat's update does not wait for it; a lease reclaimer's `FOR UPDATE` of the row, taken
# before it walks the worker's attempts and clears its lease, does): a worker whose lease
# is cleared, or without a row at all (a store used directly), covers nothing, so the
# attempt is detached at its floor, and its worker's next heartbeat attaches it again.
_CLAIMED = f"""holder AS (
    SELECT lease_expires_at FROM workers WHERE id = %(worker_id)s FOR KEY SHARE
), claimed AS (
    UPDATE jobs AS j
    SET status = 'running',
        worker_id = %(worker_id)s,
        execution_id = j.execution_id + 1,
        attempts = j.attempts + 1,
        lease_expires_at = {T_STATEMENT} + {_secs("lease")},
        detached_until = CASE WHEN (SELECT lease_expires_at FROM holder) IS NULL
                              THEN {T_STATEMENT} + {_secs("lease")} END,
        heartbeat_at = {T_STATEMENT},
        started_at = {T_STATEMENT},
        updated_at = {T_STATEMENT},
        claimed_ahead = %(ahead)s,
        ready_xid = NULL,
        progress_value = NULL, progress_stage = NULL, progress_message = NULL
    WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
    RETURNING j.*
)
SELECT id, task, queue, args::text AS args, attempts, execution_id, max_retries,
       retry_backoff, retry_backoff_max, checkpoint::text AS checkpoint,
       extract(epoch from lease_expires_at)::float8 AS lease_expires_at,
       extract(epoch from run_at)::float8 AS run_at, priority, chosen, meta::text AS meta,
       dependency_results, snoozes,
       extract(epoch from expires_at - {T_STATEMENT})::float8 AS expires_in
FROM claimed
"""

# An entry of the ready log past its lane's frontier (`lane`), and an entry of a pending
# transaction (`pend`) past the last one of it taken: what a claim walks to take entries,
# and walks again to find the first it did not take (the new frontier; what is left of a
# pending transaction). Each names `jobs_ready_idx`'s predicate, so the walk is of it.
_PAST_FRONTIER = """j.queue = lane.queue AND j.priority = lane.priority
          AND coalesce(j.fair_key, '') = lane.fair_key AND j.status = 'queued'
          AND j.ready_xid IS NOT NULL
          AND (j.ready_xid, j.id) > (lane.frontier_xid, lane.frontier_id)"""

_PENDING_LEFT = """j.queue = pend.queue AND j.priority = pend.priority
          AND coalesce(j.fair_key, '') = pend.fair_key AND j.status = 'queued'
          AND j.ready_xid IS NOT NULL AND j.ready_xid = pend.xid AND j.id > pend.after"""


# A lane's furthest mark (`l`: a row of `lanes`; `snap`: the claim's snapshot), its
# values where none was made yet: a backward walk of the marks' index, whose newest
# entries are live; a mark past the snapshot's xmax is from another cluster's ids, a
# restore's, and ignored.
LATEST_MARK = """SELECT coalesce(c.frontier_xid, '0'::xid8) AS frontier_xid,
           coalesce(c.frontier_id, '') AS frontier_id,
           coalesce(c.pending, '{}'::xid8[]) AS pending,
           coalesce(c.pending_after, '{}'::text[]) AS pending_after,
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
_PAST_WORK = """EXISTS (SELECT 1 FROM jobs AS j
                   WHERE j.queue = l.queue AND j.priority = l.priority
                     AND coalesce(j.fair_key, '') = l.fair_key
                     AND j.status = 'queued' AND j.ready_xid IS NOT NULL
                     AND (j.ready_xid, j.id) > (m.frontier_xid, m.frontier_id))"""

_PENDING_WORK = """EXISTS (SELECT 1 FROM unnest(m.pending, m.pending_after) AS p(xid, after)
                   CROSS JOIN LATERAL (
                       SELECT 1 FROM jobs AS j
                       WHERE j.queue = l.queue AND j.priority = l.priority
                         AND coalesce(j.fair_key, '') = l.fair_key
                         AND j.status = 'queued' AND j.ready_xid IS NOT NULL
                         AND j.ready_xid = p.xid AND j.id > p.after
                       LIMIT 1
                   ) AS e
                   WHERE pg_visible_in_snapshot(p.xid, (SELECT s FROM snap)))"""

HAS_WORK = f"({_PAST_WORK}\n        OR {_PENDING_WORK})"

# The claim's probe of a lane's first entry past its frontier: whether it has one, and
# its weight (the lane's quantum, which bounds how far the claim walks the lane).
_HEAD = """LEFT JOIN LATERAL (
                    SELECT true AS found, j.fair_weight AS weight FROM jobs AS j
                    WHERE j.queue = l.queue AND j.priority = l.priority
                      AND coalesce(j.fair_key, '') = l.fair_key
                      AND j.status = 'queued' AND j.ready_xid IS NOT NULL
                      AND (j.ready_xid, j.id) > (m.frontier_xid, m.frontier_id)
                    ORDER BY j.ready_xid, j.id
                    LIMIT 1
                ) AS head ON true"""


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
# claim's slots need), twice that, so a lane takes what a shorter one leaves, and never
# more than `limit` (each lane walked `limit` deep, 20 keys' claim of 50 locked 1,000 rows
# for 50 taken). `pend`: the transactions pending at the mark, each
# with the id of its last entry taken and whether this snapshot still sees it running:
# then none of its entries can be visible here, and neither walk probes it (in a fleet
# most pending transactions are claims and finishes in flight; two probes of each at
# every claim cost 40 workers a third of the claim's buffers). `logged`: per lane, the
# first runnable entries no other claim holds, up to its reach, walked in order and
# locked (SKIP LOCKED) as the claim index is walked: those of each pending transaction
# past its last one taken (`pending_taken`), then the range past the frontier (`walked`);
# and when they fall short of the claim's slots (the other lanes of its priority ran
# dry), the lanes walked to their reach go on past it for what is short (`further`). A
# row changed since this snapshot is re-read at its newest version and passed over unless
# it is still queued in this lane.
def _logged(queues: str) -> str:
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
           least(%(limit)s, 2 * (o.opening + o.quantum * ceil(greatest(0,
               %(limit)s - sum(o.opening) OVER (PARTITION BY o.priority))::float8
               / sum(o.quantum) OVER (PARTITION BY o.priority))))::int AS reach
    FROM opening AS o
), pend AS MATERIALIZED (
    SELECT lane.queue, lane.priority, lane.fair_key, lane.reach, p.xid, p.after,
           NOT pg_visible_in_snapshot(p.xid, snap.s) AS running
    FROM lane CROSS JOIN snap
    CROSS JOIN LATERAL unnest(lane.pending, lane.pending_after) AS p(xid, after)
), pending_taken AS MATERIALIZED (
    SELECT e.id, e.queue, e.priority, pend.fair_key, e.fair_weight, e.run_at, e.ready_xid,
           true AS was_pending
    FROM pend CROSS JOIN LATERAL (
        SELECT j.id, j.queue, j.priority, j.fair_weight, j.run_at, j.ready_xid FROM jobs AS j
        WHERE {_PENDING_LEFT}
          AND j.run_at <= {T_STATEMENT}
        ORDER BY j.id
        LIMIT pend.reach
        FOR UPDATE OF j SKIP LOCKED
    ) AS e
    WHERE NOT pend.running
), walked AS MATERIALIZED (
    SELECT e.id, e.queue, e.priority, lane.fair_key, e.fair_weight, e.run_at, e.ready_xid,
           false AS was_pending
    FROM lane CROSS JOIN LATERAL (
        SELECT j.id, j.queue, j.priority, j.fair_weight, j.run_at, j.ready_xid FROM jobs AS j
        WHERE {_PAST_FRONTIER}
          AND j.run_at <= {T_STATEMENT}
        ORDER BY j.ready_xid, j.id
        LIMIT lane.reach
        FOR UPDATE OF j SKIP LOCKED
    ) AS e
), further AS MATERIALIZED (
    SELECT e.id, e.queue, e.priority, lane.fair_key, e.fair_weight, e.run_at, e.ready_xid,
           false AS was_pending
    FROM (SELECT %(limit)s - (SELECT count(*) FROM pending_taken)
                 - (SELECT count(*) FROM walked) AS short) AS need
    CROSS JOIN lane
    CROSS JOIN LATERAL (
        SELECT count(*) AS taken, max(k.ready_xid) AS last_xid FROM walked AS k
        WHERE k.queue = lane.queue AND k.priority = lane.priority
          AND k.fair_key = lane.fair_key
    ) AS w
    CROSS JOIN LATERAL (
        SELECT max(k.id) AS last_id FROM walked AS k
        WHERE k.queue = lane.queue AND k.priority = lane.priority
          AND k.fair_key = lane.fair_key AND k.ready_xid = w.last_xid
    ) AS l
    CROSS JOIN LATERAL (
        SELECT j.id, j.queue, j.priority, j.fair_weight, j.run_at, j.ready_xid FROM jobs AS j
        WHERE {_PAST_FRONTIER}
          AND (j.ready_xid, j.id) > (w.last_xid, l.last_id)
          AND j.run_at <= {T_STATEMENT}
        ORDER BY j.ready_xid, j.id
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
_MARKED = f"""frontier AS MATERIALIZED (
    SELECT lane.queue, lane.priority, lane.fair_key, lane.frontier_xid AS old_xid,
           lane.frontier_id AS old_id, lane.pending AS old_pending,
           lane.pending_after AS old_after, lane.made_at,
           CASE WHEN b.id IS NULL THEN pg_snapshot_xmax(snap.s)
                ELSE coalesce(t.ready_xid, lane.frontier_xid) END AS frontier_xid,
           CASE WHEN b.id IS NULL THEN '' ELSE coalesce(t.id, lane.frontier_id) END
               AS frontier_id,
           EXISTS (SELECT 1 FROM picked AS k
                   WHERE k.queue = lane.queue AND k.priority = lane.priority
                     AND k.fair_key = lane.fair_key) AS took
    FROM lane CROSS JOIN snap
    LEFT JOIN LATERAL (
        SELECT j.ready_xid, j.id FROM jobs AS j
        WHERE {_PAST_FRONTIER}
          AND j.id NOT IN (SELECT id FROM picked)
        ORDER BY j.ready_xid, j.id
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
           coalesce((SELECT max(k.id) FROM picked AS k
                     WHERE k.was_pending AND k.ready_xid = pend.xid
                       AND k.queue = pend.queue AND k.priority = pend.priority
                       AND k.fair_key = pend.fair_key
                       AND (b.id IS NULL OR k.id < b.id)), pend.after) AS after
    FROM pend CROSS JOIN snap
    LEFT JOIN LATERAL (
        SELECT j.id FROM jobs AS j
        WHERE NOT pend.running AND {_PENDING_LEFT}
          AND j.id NOT IN (SELECT id FROM picked)
        ORDER BY j.id
        LIMIT 1
    ) AS b ON true
    WHERE b.id IS NOT NULL OR pend.running
    UNION ALL
    SELECT f.queue, f.priority, f.fair_key, r.xid, ''
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
), turned AS (
    INSERT INTO claim_turns (queue, priority, fair_key, remaining, made_at)
    SELECT k.queue, k.priority, k.fair_key, k.remaining, {T_STATEMENT}
    FROM picked AS k
    WHERE k.last_of_tier AND k.turn_key IS NOT NULL AND (k.fair_key, k.turn_key) <> ('', '')
)"""


def _claim(queues: str, due: str) -> str:
    """A claim of jobs without a concurrency or a rate key: those of the ready log
    (`_logged`) and those `due` picked through `jobs_claim_idx` (delayed jobs, retries,
    jobs handed back, released or replayed, in order of `run_at`: a job handed back keeps
    its place in line), the best `limit` of both (`picked`): by priority, then by round
    and place in the rotation of their tier (docs/design/limits.md, "Fair shares"), then
    `run_at`, then id. A lane's turn is its weight's worth of jobs (`quantum`, at least
    one): its `n`-th job is in round `ceil(n / quantum)`, or, for the lane the last claim
    stopped in before its turn was over, in round 1 while its turn lasts. Without keys a
    tier has one lane and a job's round is its rank, so the order is `run_at`'s. A job of
    a key that is `due` takes its turn with its key; one whose lane is not among the
    claim's (its key has nothing in the ready log) comes first in its round. Each tier
    whose claim took from more than one lane appends where its turns stand (`turned`:
    the last lane taken from and its jobs in that round). The rows locked and left are
    unlocked when the claim commits, milliseconds later."""
    return f"""
WITH {_logged(queues)}, due AS MATERIALIZED ({due}
), picked AS MATERIALIZED (
    SELECT c.id, c.queue, c.priority, c.fair_key, c.fair_weight, c.ready_xid, c.was_pending,
           c.turn_key,
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
                       row_number() OVER (PARTITION BY c.priority, c.fair_key
                                          ORDER BY c.run_at, c.id) AS rank
                FROM (
                    SELECT id, queue, priority, coalesce(fair_key, '') AS fair_key,
                           fair_weight, run_at, NULL::xid8 AS ready_xid, false AS was_pending
                    FROM due
                    UNION ALL
                    SELECT id, queue, priority, fair_key, fair_weight, run_at, ready_xid,
                           was_pending
                    FROM logged
                ) AS c
            ) AS c
            LEFT JOIN lane ON lane.queue = c.queue AND lane.priority = c.priority
                          AND lane.fair_key = c.fair_key
        ) AS c
        ORDER BY c.priority DESC, round, c.place, c.run_at, c.id
        LIMIT %(limit)s
    ) AS c
), {_MARKED}, {_CLAIMED}"""


# Several queues: each queue's due jobs from its own ordered walk of the claim index
# (`LATERAL`, one per queue, as the module's first comment says).
CLAIM = _claim("SELECT DISTINCT unnest(%(queues)s::text[])", f"""
    SELECT c.id, c.queue, c.priority, c.run_at, c.fair_key, c.fair_weight
    FROM (SELECT DISTINCT unnest(%(queues)s::text[]) AS name) AS q
    CROSS JOIN LATERAL (
        SELECT id, queue, priority, run_at, fair_key, fair_weight FROM jobs
        WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
          AND ready_xid IS NULL AND queue = q.name
          AND run_at <= {T_STATEMENT}
        ORDER BY priority DESC, run_at, id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) AS c""")

# CLAIM for a worker of one queue (the usual case): one ordered walk of its claim index,
# without CLAIM's per-queue LATERAL (0.87 -> 0.58 ms for claims of 10 here, 1.23 -> 0.95 ms
# for claims of 30).
CLAIM_ONE_QUEUE = _claim("SELECT %(queue)s::text", f"""
    SELECT id, queue, priority, run_at, fair_key, fair_weight FROM jobs
    WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
      AND ready_xid IS NULL AND queue = %(queue)s AND run_at <= {T_STATEMENT}
    ORDER BY priority DESC, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED""")

# The jobs a transport's messages name (store/sql/ `claim_ids`): only those still queued,
# runnable and without a concurrency, a rate or a fairness key (one with a fairness key
# waits for its turn in CLAIM), claimed as CLAIM does; a row another
# claimer is taking right now is skipped (it is active elsewhere), as is a job running,
# finished or unknown.
CLAIM_IDS = f"""
WITH picked AS (
    SELECT id FROM jobs
    WHERE id = ANY(%(ids)s::text[]) AND status = 'queued' AND concurrency_key IS NULL
      AND rate_key IS NULL AND fair_key IS NULL AND run_at <= {T_STATEMENT}
    ORDER BY id
    FOR UPDATE SKIP LOCKED
), {_CLAIMED}"""

# What a transport's sweeper (re)publishes (store/sql/ `due_for_publish`): queued,
# runnable, unkeyed jobs of its queues that fell due since its last pass (delayed and
# retried: `run_at` after `created_at`), were queued again since (reclaimed, released,
# replayed: `updated_at` after `created_at`), or have waited since `waiting_since`. In two
# parts, each on its own index: jobs of `jobs_claim_idx` (due ones, no `ready_xid`), and
# those of the ready log, only ever long waiting (enqueued runnable, never queued again).
_PUBLISHABLE = f"""status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
      AND queue = ANY(%(queues)s::text[]) AND run_at <= {T_STATEMENT}"""

DUE_FOR_PUBLISH = f"""
(SELECT id, queue, run_at FROM jobs
 WHERE {_PUBLISHABLE} AND ready_xid IS NULL
   AND ((run_at > to_timestamp(%(since)s::float8) AND run_at > created_at)
        OR (updated_at > to_timestamp(%(since)s::float8) AND updated_at > created_at)
        OR run_at <= to_timestamp(%(waiting_since)s::float8))
 UNION ALL
 SELECT id, queue, run_at FROM jobs
 WHERE {_PUBLISHABLE} AND ready_xid IS NOT NULL
   AND run_at <= to_timestamp(%(waiting_since)s::float8))
ORDER BY run_at, id
LIMIT %(limit)s
"""

# Whether the keyed claims below could find anything (store/sql/ `claim`, only when CLAIM
# filled fewer than `limit`): a queued job with a concurrency key in these queues, or
# with a rate key in any queue. One statement instead of the keyed claims' transaction of
# four round trips, on the queues (most) that have no keyed job; the first entry of each
# partial index, never a walk: a keyed job that is not due yet, or a rate-limited one of
# another queue, answers yes and the claims below look closer.
KEYED_QUEUED = """
SELECT EXISTS (SELECT 1 FROM jobs
               WHERE status = 'queued' AND concurrency_key IS NOT NULL AND rate_key IS NULL
                 AND queue = ANY(%(queues)s::text[]))
    OR EXISTS (SELECT 1 FROM jobs WHERE status = 'queued' AND rate_key IS NOT NULL)
       AS queued,
       false AS fair
"""

# Jobs with a concurrency key and no rate key (store/sql/ `claim`, only when CLAIM filled
# fewer than `limit`), in two statements. First the keys: those of runnable keyed jobs whose key
# looked below its limit, best job first, at most `limit` of them, each kept only if its
# transaction lock could be taken (a key another claimer holds is skipped, as SKIP LOCKED
# skips a row). The candidates are fixed first (MATERIALIZED), so no other key's lock is
# tried.
CLAIM_KEYS = f"""
WITH candidates AS MATERIALIZED (
    SELECT k.key FROM (
        SELECT concurrency_key AS key, max(priority) AS priority, min(run_at) AS run_at,
               max(concurrency_limit) AS most
        FROM jobs
        WHERE status = 'queued' AND concurrency_key IS NOT NULL AND rate_key IS NULL
          AND queue = ANY(%(queues)s::text[]) AND run_at <= {T_STATEMENT}
        GROUP BY concurrency_key
    ) AS k
    WHERE k.most > (SELECT count(*) FROM jobs AS r
                    WHERE r.status = 'running' AND r.concurrency_key IS NOT NULL
                      AND r.concurrency_key = k.key)
    ORDER BY k.priority DESC, k.run_at, k.key
    LIMIT %(limit)s
)
SELECT key FROM candidates
WHERE pg_try_advisory_xact_lock({CONCURRENCY_NAMESPACE}, hashtext(key))
"""

# Then, in a statement of its own (READ COMMITTED: its snapshot is taken after the locks,
# so it sees every claim of these keys committed before, and none can commit during it),
# each locked key's runnable jobs in claim order, the first `concurrency_limit - running`
# of them (each job's own limit); the best `limit` of those, claimed as CLAIM does.
CLAIM_KEYED = f"""
WITH keys AS (
    SELECT k.key, (SELECT count(*) FROM jobs AS r
                   WHERE r.status = 'running' AND r.concurrency_key IS NOT NULL
                     AND r.concurrency_key = k.key) AS running
    FROM unnest(%(keys)s::text[]) AS k(key)
), ranked AS (
    SELECT c.id, c.priority, c.run_at, c.concurrency_limit, keys.running,
           row_number() OVER (PARTITION BY c.concurrency_key
                              ORDER BY c.priority DESC, c.run_at, c.id) AS rank
    FROM jobs AS c JOIN keys ON c.concurrency_key = keys.key
    WHERE c.status = 'queued' AND c.concurrency_key IS NOT NULL AND c.rate_key IS NULL
      AND c.queue = ANY(%(queues)s::text[]) AND c.run_at <= {T_STATEMENT}
), picked AS (
    SELECT j.id FROM jobs AS j
    WHERE j.id = ANY(ARRAY(SELECT id FROM ranked WHERE rank <= concurrency_limit - running))
      AND j.status = 'queued'
    ORDER BY j.priority DESC, j.run_at, j.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), {_CLAIMED}"""

# The rate-limited jobs a claim looks at, as CTEs: `keys`, every rate key of a queued job,
# one probe each of jobs_rated_claim_idx (a skip scan: the index is ordered by key);
# `best`, each key's best runnable job of these queues (its limit is the key's, for the
# look), the key's walk stopping at the first; `open`, the best `limit` of the keys whose
# starts within the period (`used`: its executions, ended or running) looked below
# their limit. A claim's cost follows the number of keys, not their backlogs.
# A key's starts are read from `RATE_STARTS` (common.py): ended attempts by
# executions_rate_idx, running ones from their job rows by jobs_running_rate_idx (the
# claim writes no execution row), so an attempt counts from its claim on.
_RATE_KEYS = f"""keys AS (
    (SELECT rate_key AS key FROM jobs
     WHERE status = 'queued' AND rate_key IS NOT NULL
     ORDER BY rate_key LIMIT 1)
    UNION ALL
    SELECT (SELECT j.rate_key FROM jobs AS j
            WHERE j.status = 'queued' AND j.rate_key IS NOT NULL AND j.rate_key > k.key
            ORDER BY j.rate_key LIMIT 1)
    FROM keys AS k WHERE k.key IS NOT NULL
), best AS MATERIALIZED (
    SELECT k.key, b.priority, b.run_at, b.rate_limit AS n, b.rate_period AS period
    FROM keys AS k
    CROSS JOIN LATERAL (
        SELECT priority, run_at, rate_limit, rate_period FROM jobs
        WHERE status = 'queued' AND rate_key IS NOT NULL AND rate_key = k.key
          AND queue = ANY(%(queues)s::text[]) AND run_at <= {T_STATEMENT}
        ORDER BY priority DESC, run_at, id
        LIMIT 1
    ) AS b
)"""

# The runnable jobs of a rate key, best first (`rate_key = <key>`): a walk of its part of
# jobs_rated_claim_idx, at most `limit` of them (no claim takes more).
_KEY_JOBS = f"""
        FROM jobs
        WHERE status = 'queued' AND rate_key IS NOT NULL AND rate_key = {{key}}
          AND queue = ANY(%(queues)s::text[]) AND run_at <= {T_STATEMENT}
        ORDER BY priority DESC, run_at, id
        LIMIT %(limit)s"""

# Jobs with a rate key (store/sql/ `claim`, in the keyed claim's transaction, only when
# the claims before filled fewer than `limit`), in two statements, as keyed jobs are.
# First the keys: the open rate keys (`_RATE_KEYS`), each with whether its transaction
# lock could be taken (a key another claimer holds is skipped, never waited for); with
# them the concurrency keys of their first jobs that have one, locked the same way (a job
# with both keys obeys both); and a `held` row when any rate-limited job is runnable here
# at all, so that only then is RATE_WAIT asked. The candidates are fixed first
# (MATERIALIZED), so no other key's lock is tried.
CLAIM_RATE_KEYS = f"""
WITH RECURSIVE {_RATE_KEYS}, open AS MATERIALIZED (
    SELECT key FROM best
    WHERE n > (SELECT count(*) FROM {RATE_STARTS} AS e
               WHERE e.rate_key IS NOT NULL AND e.rate_key = best.key
                 AND e.started_at > {T_STATEMENT} - make_interval(secs => best.period))
    ORDER BY priority DESC, run_at, key
    LIMIT %(limit)s
), keyed AS MATERIALIZED (
    SELECT DISTINCT c.concurrency_key AS key
    FROM open AS o
    CROSS JOIN LATERAL (SELECT concurrency_key {_KEY_JOBS.format(key="o.key")}) AS c
    WHERE c.concurrency_key IS NOT NULL
)
SELECT 'rate' AS kind, key, pg_try_advisory_xact_lock({RATE_NAMESPACE}, hashtext(key)) AS locked
FROM open
UNION ALL
SELECT 'concurrency', key, pg_try_advisory_xact_lock({CONCURRENCY_NAMESPACE}, hashtext(key))
FROM keyed
UNION ALL
SELECT 'held', NULL, NULL WHERE EXISTS (SELECT 1 FROM best)
"""

# Then, in a statement of its own (its snapshot taken after the locks: it sees every
# start of these keys committed before, and none can commit during it): the first jobs of
# each locked rate key (`candidates`), per key and period their starts within the period
# (`used`), per locked concurrency key its running jobs. A job whose concurrency key is
# not locked waits; one with a concurrency key takes a place among that key's free slots
# (`free`), among the candidates whose rate key has room, so a job waiting for its rate
# key's next start does not hold a concurrency slot another rate key could use. Then each
# rate key's jobs in claim order, the first `rate_limit - used` of them (each job's own
# limit); the best `limit` of those, claimed as CLAIM does (the running job row, with its
# rate key and start, is the start the next claim counts).
CLAIM_RATED = f"""
WITH candidates AS MATERIALIZED (
    SELECT c.* FROM unnest(%(rate_keys)s::text[]) AS k(key)
    CROSS JOIN LATERAL (
        SELECT id, priority, run_at, rate_key, rate_limit, rate_period, concurrency_key,
               concurrency_limit {_KEY_JOBS.format(key="k.key")}
    ) AS c
), windows AS MATERIALIZED (
    SELECT g.key, g.period,
           (SELECT count(*) FROM {RATE_STARTS} AS e
            WHERE e.rate_key IS NOT NULL AND e.rate_key = g.key
              AND e.started_at > {T_STATEMENT} - make_interval(secs => g.period)) AS used
    FROM (SELECT DISTINCT rate_key AS key, rate_period AS period FROM candidates) AS g
), slots AS MATERIALIZED (
    SELECT k.key, (SELECT count(*) FROM jobs AS r
                   WHERE r.status = 'running' AND r.concurrency_key IS NOT NULL
                     AND r.concurrency_key = k.key) AS running
    FROM unnest(%(concurrency_keys)s::text[]) AS k(key)
), fit AS (
    SELECT c.id, c.priority, c.run_at, c.rate_key, c.concurrency_key,
           c.rate_limit - w.used AS room, c.concurrency_limit - s.running AS free
    FROM candidates AS c
    JOIN windows AS w ON w.key = c.rate_key AND w.period = c.rate_period
    LEFT JOIN slots AS s ON s.key = c.concurrency_key
    WHERE c.rate_limit > w.used AND (c.concurrency_key IS NULL OR s.key IS NOT NULL)
), within_slots AS (
    SELECT *, row_number() OVER (PARTITION BY concurrency_key
                                 ORDER BY priority DESC, run_at, id) AS place
    FROM fit
), ranked AS (
    SELECT id, room,
           row_number() OVER (PARTITION BY rate_key ORDER BY priority DESC, run_at, id) AS rank
    FROM within_slots WHERE concurrency_key IS NULL OR place <= free
), picked AS (
    SELECT j.id FROM jobs AS j
    WHERE j.id = ANY(ARRAY(SELECT id FROM ranked WHERE rank <= room)) AND j.status = 'queued'
    ORDER BY j.priority DESC, j.run_at, j.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), {_CLAIMED}"""

# How long until a runnable rate-limited job of these queues may start, in seconds (None:
# none is held back by its rate key): per key (with its best job's limit), the start that
# leaves the window last among the `rate_limit` latest, plus the period. A key with room
# counts nothing here (what holds its jobs back, if anything, is a concurrency limit).
RATE_WAIT = f"""
WITH RECURSIVE {_RATE_KEYS}
SELECT extract(epoch from min(nth.started_at + make_interval(secs => best.period))
                          - {T_STATEMENT})::float8 AS wait
FROM best
CROSS JOIN LATERAL (
    SELECT e.started_at FROM {RATE_STARTS} AS e
    WHERE e.rate_key IS NOT NULL AND e.rate_key = best.key
      AND e.started_at > {T_STATEMENT} - make_interval(secs => best.period)
    ORDER BY e.started_at DESC
    LIMIT 1 OFFSET best.n - 1
) AS nth
"""
