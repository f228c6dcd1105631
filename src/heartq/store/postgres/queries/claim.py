"""The claim: runnable jobs put under a worker's lease, each as a new execution. Jobs
without a concurrency or a rate key (`CLAIM`, `CLAIM_ONE_QUEUE`, and where no fairness
key waits `CLAIM_QUEUES_IN_ORDER` and `CLAIM_IN_ORDER`; a transport's `CLAIM_IDS`), and
what a transport's sweeper publishes (`DUE_FOR_PUBLISH`); those with a key are
`keyed.py`'s, which takes from here what every claim does with its jobs (`_claimed`) and
the walk of an index's due jobs (`_due_in_order`)."""

from __future__ import annotations

from heartq.store.postgres.claim_commit import SETTING
from heartq.store.postgres.queries.common import (
    JOB_ID_ARRAY,
    T_STATEMENT,
    _secs,
)
from heartq.store.postgres.queries.ready_log import (
    LOGGED_IN_ORDER,
    LOGGED_QUEUES_IN_ORDER,
    MARKED,
    TURNED,
    entry_of,
    logged,
)
from heartq.store.records import CLAIMED_COLUMNS

# A claim of jobs without a concurrency or a rate key (`logged`) commits without waiting
# for its flush when its connection carries heartq's setting for it and the server has
# been up that long (`claim_commit.py`): `set_config(..., true)` lasts for the statement's
# own transaction, whose commit reads it. Without the setting the comparison is NULL and
# nothing is set. Evaluated once (a materialized CTE joined to the leases' insert: with
# nothing claimed it is never read, and an empty claim has nothing to flush).
LAZY_COMMIT = f"""SELECT CASE WHEN statement_timestamp() - pg_postmaster_start_time()
                 >= make_interval(secs => current_setting('{SETTING}', true)::float8)
            THEN set_config('synchronous_commit', 'off', true) END"""


# Each queue's best runnable jobs come from its own ordered walk of the claim index
# (`LATERAL`, one per queue): `queue = ANY(...)` with this ORDER BY would read and sort
# every queued row of those queues at each claim, so the claim would slow down with the
# backlog. Up to `limit` rows per queue are locked and the best `limit` of them taken;
# the others are unlocked when the claim commits, milliseconds later.
# What every claim does with the jobs it `picked` (a CTE of ids before this, with each
# one's entry of the ready log where it came from there): they run under a new execution,
# each on a lease row of its own (`leases`: its execution id, worker, attempts, start,
# floor; docs/design-notes/hot-path.md, stage 1). A job of the ready log leaves the log
# (its entry deleted) and its document is not written: it stays as its enqueue wrote it,
# and the `jobs` view says `running` while its lease is there. A due job's document is
# marked `running` (what takes it out of its claim index, and `started_at` is what the
# running jobs' rate index reads). The attempt's execution row is written once, complete,
# by the statement that ends it (FINISH, RELEASE), and the `executions` view shows it
# open meanwhile (its lease).
#
# The attempt's lease is its worker's (docs/design/leases.md, "Leases and heartbeats"): the
# lease row's `lease_expires_at` is its floor, never renewed. The worker's row is read
# `FOR KEY SHARE` (a heartbeat's update does not wait for it; a lease reclaimer's `FOR
# UPDATE` of the row, taken before it walks the worker's attempts and clears its lease,
# does): a worker whose lease is cleared, or without a row at all (a store used
# directly), covers nothing, so the attempt is detached at its floor, and its worker's
# next heartbeat attaches it again.
def _claimed(logged: bool, turns: str = "") -> str:
    """The CTEs that put the `picked` jobs under their leases, and the claim's answer
    (each document read once, by key: `docs`, for the leases and the answer).
    `logged`: `picked` has the ready log's `entry` (the row of `ready` the claim locked,
    by its `ctid`: an entry is never updated, so the version locked is the one to
    delete, and a delete by `ctid` is a probe whatever the statistics say), and those
    with an entry are taken from the log; else every picked job is a due one whose
    document the claim locked. `turns`: a condition under which the claim took nothing
    because turns are due (`CLAIM_IN_ORDER`), said by one more row, of NULLs only."""
    due = "SELECT id FROM picked WHERE entry IS NULL" if logged else "SELECT id FROM picked"
    taken = """taken AS (
    DELETE FROM ready WHERE ctid = ANY(ARRAY(SELECT entry FROM picked WHERE entry IS NOT NULL))
), """ if logged else ""
    commit = f"""commit_mode AS MATERIALIZED (
    {LAZY_COMMIT} AS setting
), """ if logged else ""
    return f"""holder AS (
    SELECT lease_expires_at FROM workers WHERE id = %(worker_id)s FOR KEY SHARE
), {taken}{commit}running AS (
    UPDATE job_documents AS j
    SET status = 'running', started_at = {T_STATEMENT}, updated_at = {T_STATEMENT},
        ready_xid = NULL, progress_value = NULL, progress_stage = NULL, progress_message = NULL
    WHERE j.id = ANY(ARRAY({due}))
), docs AS MATERIALIZED (
    SELECT j.id, j.task, j.queue, j.args, j.execution_id, j.attempts, j.max_retries,
           j.retry_backoff, j.retry_backoff_max, j.checkpoint, j.run_at, j.priority, j.chosen,
           j.meta, j.dependency_results, j.snoozes, j.expires_at
    FROM job_documents AS j
    WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
), claimed AS (
    INSERT INTO leases (job_id, execution_id, worker_id, attempts, started_at,
                        lease_expires_at, heartbeat_at, detached_until, claimed_ahead)
    SELECT d.id, d.execution_id + 1, %(worker_id)s, d.attempts + 1, {T_STATEMENT},
           {T_STATEMENT} + {_secs("lease")}, {T_STATEMENT},
           CASE WHEN (SELECT lease_expires_at FROM holder) IS NULL
                THEN {T_STATEMENT} + {_secs("lease")} END,
           %(ahead)s
    FROM docs AS d{" CROSS JOIN commit_mode" if logged else ""}
    RETURNING job_id, execution_id, attempts, lease_expires_at
)
SELECT d.id, d.task, d.queue, d.args::text AS args, c.attempts, c.execution_id, d.max_retries,
       d.retry_backoff, d.retry_backoff_max, d.checkpoint::text AS checkpoint,
       extract(epoch from c.lease_expires_at)::float8 AS lease_expires_at,
       extract(epoch from d.run_at)::float8 AS run_at, d.priority, d.chosen,
       d.meta::text AS meta, d.dependency_results, d.snoozes,
       extract(epoch from d.expires_at - {T_STATEMENT})::float8 AS expires_in
FROM claimed AS c JOIN docs AS d ON d.id = c.job_id{_turns_due(turns)}
"""


def _turns_due(turns: str) -> str:
    """The row that says the claim took nothing because turns are due (`turns`, a
    condition), as many columns as a claimed job's, each NULL; nothing without one."""
    if not turns:
        return ""
    return f"""
UNION ALL
SELECT {", ".join(["NULL"] * len(CLAIMED_COLUMNS))} WHERE {turns}"""


def _claim(queues: str, due: str) -> str:
    """A claim of jobs without a concurrency or a rate key: those of the ready log
    (`ready_log.logged`) and those `due` picked through `jobs_claim_idx` (delayed jobs, retries,
    jobs handed back, released or replayed, in order of `run_at`: a job handed back keeps
    its place in line), the best `limit` of both (`picked`): by priority, then by round
    and place in the rotation of their tier (docs/design/limits.md, "Fair shares"), then
    `run_at`, then id. A lane's turn is its weight's worth of jobs (`quantum`, at least
    one): its `n`-th job is in round `ceil(n / quantum)`, or, for the lane the last claim
    stopped in before its turn was over, in round 1 while its turn lasts. A key's rank is
    counted in its own queue's lane: counted over the key's lanes of all the claim's
    queues, one queue's backlog of the key took every early round and the key's jobs
    of the claim's other queues waited behind it (a process worker's claim of `default`
    and `proc` starved `proc`'s flood key). Without keys a tier has one lane and a
    job's round is its rank, so the order is `run_at`'s, across the claim's queues too. A job of
    a key that is `due` takes its turn with its key; one whose lane is not among the
    claim's (its key has nothing in the ready log) comes first in its round. Each tier
    whose claim took from more than one lane appends where its turns stand (`turned`:
    the last lane taken from and its jobs in that round). The rows locked and left are
    unlocked when the claim commits, milliseconds later."""
    return f"""
WITH {logged(queues)}, due AS MATERIALIZED ({due}
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
), {MARKED}, {TURNED}, {_claimed(logged=True)}"""


# What the claim index holds (migration 0026): queued jobs without a concurrency or a
# rate key that are not in the ready log (delayed, retried, handed back).
_DUE = """status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
                AND ready_xid IS NULL"""


# The due jobs of one range of an index in claim order (`held`: the index's predicate and
# any filter; `range_`: its leading columns' values, after which it is ordered by
# priority, `run_at`, id), at most `most`, best first. In one walk in that order each
# priority's delayed jobs (not due yet) lie right after its due ones, and a claim that
# found fewer due jobs than it may take walked every delayed job of the range (100,000
# delayed in a queue: 717 buffers, 6 ms a claim; of a rate or a concurrency key: 13 ms a
# claim and its finish). So each priority is walked on its own, as a range that ends at
# its first job not due yet: the range's priorities found one probe each (`level`,
# highest first, recursively: a recursive CTE is read as far as its reader asks, so a
# walk filled by its highest priority probes no other), each walked from its first
# entry, `LIMIT` over all. `lock`: the rows taken are locked (SKIP LOCKED).
def _due_in_order(held: str, range_: str, columns: str, most: str, lock: bool = False) -> str:
    """The due jobs' walk of one range, its priorities one by one, as a query."""
    locked = "\n            FOR UPDATE SKIP LOCKED" if lock else ""
    return f"""
        WITH RECURSIVE level AS (
            (SELECT priority FROM job_documents
             WHERE {held} AND {range_}
             ORDER BY priority DESC, run_at, id
             LIMIT 1)
            UNION ALL
            SELECT n.priority FROM level CROSS JOIN LATERAL (
                SELECT priority FROM job_documents
                WHERE {held} AND {range_} AND priority < level.priority
                ORDER BY priority DESC, run_at, id
                LIMIT 1
            ) AS n
        )
        SELECT c.* FROM level CROSS JOIN LATERAL (
            SELECT {columns} FROM job_documents
            WHERE {held} AND {range_} AND priority = level.priority
              AND run_at <= {T_STATEMENT}
            ORDER BY run_at, id
            LIMIT {most}{locked}
        ) AS c
        LIMIT {most}"""


def _due(queue: str) -> str:
    """The due jobs of the claim index of queue `queue` (an SQL expression), at most
    `limit`, locked."""
    return _due_in_order(_DUE, f"queue = {queue}",
                         "id, queue, priority, run_at, fair_key, fair_weight",
                         "%(limit)s", lock=True)  # fmt: skip


# The due jobs of several queues: each queue's from its own walks of the claim index
# (`LATERAL`, one per queue, as the module's first comment says).
_DUE_OF_QUEUES = f"""
    SELECT c.id, c.queue, c.priority, c.run_at, c.fair_key, c.fair_weight
    FROM (SELECT DISTINCT unnest(%(queues)s::text[]) AS name) AS q
    CROSS JOIN LATERAL ({_due("q.name")}
    ) AS c"""

# Several queues.
CLAIM = _claim("SELECT DISTINCT unnest(%(queues)s::text[])", _DUE_OF_QUEUES)

# The due jobs of one queue: its walks without CLAIM's per-queue LATERAL (0.87 -> 0.58
# ms for claims of 10 here, 1.23 -> 0.95 ms for claims of 30).
_DUE_OF_ONE_QUEUE = _due("%(queue)s")

# CLAIM for a worker of one queue (the usual case).
CLAIM_ONE_QUEUE = _claim("SELECT %(queue)s::text", _DUE_OF_ONE_QUEUE)

def _claim_in_order(logged_in_order: str, due: str) -> str:
    """A claim without the turns of fair shares (`logged_in_order`: the ready log's CTEs
    without them; `due`: the due jobs' walk), where no job of its queues has a fairness
    key: the same jobs in the same order as the claim with turns (without keys a tier has
    one lane and a job's round is its rank, so CLAIM's order is priority, then `run_at`,
    then id: `picked` sorts by that alone), a third fewer instructions a job claimed
    (docs/BENCHMARKS.md, "The claim in order"). Where a lane of its queues with a key has
    work, or a due job has a key (`turns_due`), it takes nothing (what it locked is let go
    at its commit) and answers one row of NULLs: the caller claims with the turns."""
    return f"""
WITH {logged_in_order}, due AS MATERIALIZED ({due}
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
), {MARKED}, {_claimed(logged=True, turns="(SELECT found FROM turns_due)")}"""


# CLAIM_ONE_QUEUE where no job of the queue has a fairness key (the usual case: store/sql/
# `_claim_rows` tries it first; `ready_log.LOGGED_IN_ORDER`: no rotation, no quantum, no
# rounds, no turn appended).
CLAIM_IN_ORDER = _claim_in_order(LOGGED_IN_ORDER, _DUE_OF_ONE_QUEUE)

# CLAIM where no job of the queues has a fairness key (a worker of several queues, as a
# process worker's `default` and `proc`).
CLAIM_QUEUES_IN_ORDER = _claim_in_order(LOGGED_QUEUES_IN_ORDER, _DUE_OF_QUEUES)

# The jobs a transport's messages name (store/sql/ `claim_ids`): only those still queued,
# runnable and without a concurrency, a rate or a fairness key (one with a fairness key
# waits for its turn in CLAIM), claimed as CLAIM does: a job of the ready log by its entry
# (found by the key its document holds; gone once a claim took it), a due one by its
# document; a row another claimer is taking right now is skipped (it is active
# elsewhere), as is a job running, finished or unknown. Each document is found by its
# key, one probe an id (`LATERAL`, not pulled up: its `LIMIT`, its lock); its keys'
# absence is written `num_nonnulls(...) = 0`, which the planner cannot match with the
# claim index's predicate: with `id = ANY(...)` and plain tests, statistics of a fresh
# backlog made it walk that index instead of probing the key.
CLAIM_IDS = f"""
WITH named AS MATERIALIZED (
    SELECT DISTINCT unnest(%(ids)s::{JOB_ID_ARRAY}) AS id
), logged AS MATERIALIZED (
    SELECT r.id, r.entry FROM named AS x
    CROSS JOIN LATERAL (
        SELECT d.id, d.queue, d.priority, d.fair_key, d.ready_xid FROM job_documents AS d
        WHERE d.id = x.id AND d.ready_xid IS NOT NULL AND d.status = 'queued'
          AND num_nonnulls(d.fair_key, d.concurrency_key, d.rate_key) = 0
          AND d.run_at <= {T_STATEMENT}
        LIMIT 1
    ) AS d
    CROSS JOIN LATERAL (
        SELECT r.job_id AS id, r.ctid AS entry FROM ready AS r
        WHERE {entry_of("r", "d")}
        FOR UPDATE OF r SKIP LOCKED
    ) AS r
    ORDER BY r.id
), due AS MATERIALIZED (
    SELECT d.id FROM named AS x
    CROSS JOIN LATERAL (
        SELECT d.id FROM job_documents AS d
        WHERE d.id = x.id AND d.status = 'queued' AND d.ready_xid IS NULL
          AND num_nonnulls(d.fair_key, d.concurrency_key, d.rate_key) = 0
          AND d.run_at <= {T_STATEMENT}
        FOR UPDATE OF d SKIP LOCKED
    ) AS d
    ORDER BY d.id
), picked AS (
    SELECT id, entry FROM logged
    UNION ALL
    SELECT id, NULL::tid FROM due
), {_claimed(logged=True)}"""

# What a transport's sweeper (re)publishes (store/sql/ `due_for_publish`): queued,
# runnable, unkeyed jobs of its queues that fell due since its last pass (delayed and
# retried: `run_at` after `created_at`), were queued again since (reclaimed, released,
# replayed: `updated_at` after `created_at`), or have waited since `waiting_since`. In two
# parts, each on its own index: jobs of `jobs_claim_idx` (due ones, no `ready_xid`), and
# those of the ready log, only ever long waiting (enqueued runnable, never queued again).
_PUBLISHABLE = f"""status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
      AND queue = ANY(%(queues)s::text[]) AND run_at <= {T_STATEMENT}"""

DUE_FOR_PUBLISH = f"""
(SELECT id, queue, run_at FROM job_documents
 WHERE {_PUBLISHABLE} AND ready_xid IS NULL
   AND ((run_at > to_timestamp(%(since)s::float8) AND run_at > created_at)
        OR (updated_at > to_timestamp(%(since)s::float8) AND updated_at > created_at)
        OR run_at <= to_timestamp(%(waiting_since)s::float8))
 UNION ALL
 SELECT job_id, queue, run_at FROM ready
 WHERE queue = ANY(%(queues)s::text[]) AND run_at <= {T_STATEMENT}
   AND run_at <= to_timestamp(%(waiting_since)s::float8))
ORDER BY run_at, id
LIMIT %(limit)s
"""
