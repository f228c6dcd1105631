"""The plan census: the plans of heartq's hot PostgreSQL statements, read while heartq's
own store runs them, in states of a queue whose statistics differ.

PostgreSQL chooses a plan from the table's statistics, and a prepared statement's
generic plan from statistics and guesses (a parameter's LIMIT is taken for a tenth of
the rows): a backlog analyzed, a burst drained, a table pruned can each tip a choice.
The census runs the store's real operations (claims, heartbeats, pulses, finishes,
releases, the reaper, the pruner) and, for each watched statement it sends, first runs
that same statement with the same values under `EXPLAIN (ANALYZE, BUFFERS)` twice in a
transaction rolled back: prepared and executed on its generic plan (what a worker's
session runs), and planned for its values (what runs behind a transaction-mode pooler,
where nothing is prepared). Then the store's own run goes ahead as if nothing happened.

What a plan is reduced to (`Plan`): its shape (the tree of node types, the relations
and indexes they read, their direction: no costs, rows or conditions), whether it was
JIT-compiled, and what it read of the queue's schema (buffers, index entries: this
transaction's own counters, so they do not depend on the machine's load).
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from heartq.lifecycle.fate import failed, succeeded
from heartq.model import NewJob, Outcome, Progress, PulseReport, Renewal, Report, WorkerInfo
from heartq.store.postgres import PostgresStore
from heartq.store.postgres import queries as pg_q
from heartq.store.postgres.statements import NamedCursor, positional

WATCHED = (
    # The claim: plain jobs of one queue and of several (in order, and taking turns), a
    # transport's claim by ids, the look for keyed jobs, the keyed and rate-limited
    # claims, the start of buffered jobs.
    "CLAIM_IN_ORDER", "CLAIM_ONE_QUEUE", "CLAIM_QUEUES_IN_ORDER", "CLAIM", "CLAIM_IDS",
    "KEYED_QUEUED", "CLAIM_KEYS", "CLAIM_KEYED", "CLAIM_RATE_KEYS", "CLAIM_RATED", "RATE_WAIT",
    "START_AHEAD",
    # Holding and ending leases.
    "HEARTBEAT", "SWEEP", "PULSE", "RUNNING_CANCELS", "FINISH", "RELEASE",
    # The reaper.
    "EXPIRED_WORKERS", "SELECT_LAPSED", "CLEAR_WORKER_LEASE", "SELECT_DETACHED",
    "GIVE_UP_RESULTS",
    # The pruner.
    "SELECT_PRUNABLE_JOBS", "RECORD_PRUNED_SUCCESSES", "DELETE_EXECUTIONS_OF",
    "DELETE_DEPENDENCIES_OF", "DELETE_JOBS", "PRUNE_CLAIM_MARKS",
    # The drain's look for work left (`heartq worker --burst`, `drain`): for a queue with
    # work, and for one with none (every part of it read to its end).
    "HAS_PENDING",
    # The enqueue (INSERT_JOBS_WAKING; INSERT_JOBS, its twin without the wake-up, runs on
    # the caller's connection, whose cursors are not heartq's: the same plan), and the
    # locks of a job's dependencies (one running, one queued) before its enqueue.
    "INSERT_JOBS_WAKING", "LOCK_DEPENDENCIES",
    # A running job's dependent settled as the job ends, and the edge marked; a job
    # blocked by a dead dependency, and its own dependent held by it.
    "SETTLE_DEPENDENTS", "END_DEPENDENCY_EDGES", "SYNC_HOLDS", "SHIFT_HOLDERS",
    # An operator's cancel of a queued job: its status, read under its rows' locks.
    "JOB_STATUS",
)  # fmt: skip
"""The hot statements, by their name in `heartq.store.postgres.queries`."""

MODES = ("generic", "custom")

_COUNTERS = """
SELECT coalesce(sum(pg_stat_get_xact_blocks_fetched(c.oid)), 0)::bigint AS buffers,
       coalesce(sum(pg_stat_get_xact_tuples_returned(c.oid))
                FILTER (WHERE c.relkind = 'i'), 0)::bigint AS entries
FROM pg_class AS c
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'i', 't')
"""


@dataclass(frozen=True)
class Plan:
    """One run of a watched statement under EXPLAIN (ANALYZE), reduced. `case`: which
    of the statement's runs in its state's exercise this is, the same in every state:
    the queues and the worker it ran for (the exercise sends some statements for several,
    a claim of a queue of keyed jobs only, say), and its place among the runs for those."""

    name: str
    mode: str
    case: str
    shape: str
    jit: bool
    buffers: int
    entries: int

    @property
    def walks(self) -> tuple[str, ...]:
        """What the plan reads and how, whatever the order of its joins and the strategy
        of its aggregates: each relation it scans, with the index it walks (an index-only
        scan is the same walk) or `seq` and `bitmap` for a read of the whole or a bitmap."""
        found = []
        for line in self.shape.splitlines():
            if "relation=" not in line:
                continue
            relation = line.split("relation=", 1)[1].split()[0]
            index = line.split("index=", 1)[1].split()[0] if "index=" in line else None
            how = ("seq" if "Seq Scan" in line else "bitmap" if "Bitmap" in line
                   else "whole" if " whole " in line
                   else "backward" if "scan=Backward" in line else "index")  # fmt: skip
            if "ModifyTable" in line or "Insert" in line:
                continue
            found.append(f"{relation} {how} {index or ''}".rstrip())
        return tuple(sorted(found))


def _shape(node: dict[str, Any], depth: int = 0) -> Iterator[str]:
    """The plan tree's nodes, one line each, indented by depth: what a plan that turned
    would change (a node, a relation, an index, a direction, whether an index scan is a
    search or a walk of the whole index), not what the statistics move (costs, rows) or
    what the values change (the conditions themselves)."""
    parts = [node.get("Parent Relationship", ""), node["Node Type"]]
    if "Index Name" in node and "Index Cond" not in node:
        parts.append("whole")
    for key in ("Subplan Name", "CTE Name", "Join Type", "Strategy", "Scan Direction",
                "Relation Name", "Index Name"):  # fmt: skip
        if key in node and node[key] not in ("Forward", "Inner", "Plain"):
            parts.append(f"{key.split()[0].lower()}={node[key]}")
    yield "  " * depth + " ".join(p for p in parts if p)
    for child in node.get("Plans", ()):
        yield from _shape(child, depth + 1)


_names = itertools.count()


def explain(conn: psycopg.Connection[Any], text: str, values: list[Any], mode: str) -> Plan:
    """`text` (with `$n` placeholders) run once with `values` under EXPLAIN (ANALYZE,
    BUFFERS) on `conn`, in a transaction (or a savepoint of the caller's) rolled back:
    prepared and run on its generic plan, or planned for its values (`mode`)."""
    statement = f"census_{next(_names)}"
    literal = psycopg.ClientCursor(conn)
    arguments = literal.mogrify(", ".join(["%s"] * len(values)), values) if values else ""
    with conn.transaction(force_rollback=True):
        # Any statement's estimated cost past the JIT threshold, as a backlog's
        # statistics make a generic plan's: compiled at every run unless the session
        # turned JIT off.
        conn.execute("SET LOCAL jit_above_cost = 0")
        conn.execute(f"SET LOCAL plan_cache_mode = force_{mode}_plan")
        conn.execute(f"PREPARE {statement} AS {text}")
        try:
            before = conn.execute(_COUNTERS).fetchone()
            run = f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE {statement}"
            rows = conn.execute(f"{run} ({arguments})" if values else run).fetchall()
            after = conn.execute(_COUNTERS).fetchone()
        finally:
            conn.execute(f"DEALLOCATE {statement}")
    assert before is not None and after is not None
    document = next(iter(rows[0].values()))
    top = (json.loads(document) if isinstance(document, str) else document)[0]
    return Plan(
        name="", mode=mode, case="", shape="\n".join(_shape(top["Plan"])), jit="JIT" in top,
        buffers=after["buffers"] - before["buffers"],
        entries=after["entries"] - before["entries"],
    )  # fmt: skip


class Census:
    """Every plan of a watched statement read while recording (`recording`), by state."""

    def __init__(self) -> None:
        self.plans: dict[str, list[Plan]] = {}
        self.state = ""
        self.jit_available = True
        # A statement of several texts (run in order, in one transaction) is watched part
        # by part: each part's runs are told apart by their case ("step 2 of 4 ...").
        self._texts: dict[str, tuple[str, str]] = {}
        for name in WATCHED:
            statement = getattr(pg_q, name)
            parts = statement if isinstance(statement, tuple) else (statement,)
            for step, text in enumerate(parts, 1):
                label = f"step {step} of {len(parts)} " if len(parts) > 1 else ""
                self._texts[text] = (name, label)

    @contextlib.contextmanager
    def recording(self, state: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
        """Read the plans of every watched statement heartq's cursors send in the block,
        as `state`."""
        self.state = state
        original = NamedCursor.execute
        census = self
        busy = False

        def execute(cursor: NamedCursor, query: Any, params: Any = None, **kwargs: Any) -> Any:
            nonlocal busy
            watched = census._texts.get(query) if isinstance(query, str) else None
            if watched is not None and params is not None and not busy:
                busy = True
                name, step = watched
                try:
                    text, keys = positional(query)
                    values = [params[key] for key in keys]
                    for mode in MODES:
                        plan = explain(cursor.connection, text, values, mode)
                        census.record(name, plan, step + _case(params))
                finally:
                    busy = False
            return original(cursor, query, params, **kwargs)

        with monkeypatch.context() as patch:
            patch.setattr(NamedCursor, "execute", execute)
            yield

    def record(self, name: str, plan: Plan, case: str) -> None:
        """Keep `plan` as the next run of `name` for `case` in this state."""
        plans = self.plans.setdefault(self.state, [])
        place = sum(p.name == name and p.mode == plan.mode and p.case.startswith(f"{case} #")
                    for p in plans)  # fmt: skip
        plans.append(Plan(name, plan.mode, f"{case} #{place}", plan.shape, plan.jit,
                          plan.buffers, plan.entries))  # fmt: skip


def _case(params: Any) -> str:
    """What a run was for: its queues and its worker, where its values name them."""
    named = [params[key] for key in ("queue", "queues", "worker_id") if key in params]
    return " ".join(",".join(v) if isinstance(v, list) else str(v) for v in named) or "-"


# A backlog written as `App.enqueue_many` writes it, by the thousand a statement: runnable
# jobs without a key in the ready log (`ready_xid`, the enqueuing transaction's, and an
# entry of `ready` each), or due
# ones (no `ready_xid`: delayed, retried or handed back), each statement a transaction of
# its own. Ids sort as heartq's do (by creation), in its UUID's shape.
_FILL = """
WITH lane AS (
    INSERT INTO lanes SELECT %(queue)s, p FROM generate_series(0, %(lanes)s::int - 1) AS p
    WHERE %(ready)s ON CONFLICT DO NOTHING
),
n AS (SELECT i, lpad(to_hex(%(base)s::bigint + i), 30, '0') AS h
      FROM generate_series(1, %(count)s::int) AS i),
made AS (
    INSERT INTO job_documents (id, task, queue, args, priority, status, run_at, max_retries,
                      retry_backoff, retry_backoff_max, chosen, created_at, updated_at,
                      ready_xid)
    SELECT (substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-7' || substr(h, 13, 3) || '-8'
            || substr(h, 16, 3) || '-' || substr(h, 19, 12))::uuid,
           't', %(queue)s, '{}', i %% %(lanes)s::int, 'queued', now() - interval '1 second',
           3, 5, 300, 15, now(), now(), CASE WHEN %(ready)s THEN pg_current_xact_id() END
    FROM n
    RETURNING id, queue, priority, ready_xid, run_at
)
INSERT INTO ready (queue, priority, fair_key, ready_xid, job_id, run_at)
SELECT queue, priority, '', ready_xid, id, run_at FROM made WHERE ready_xid IS NOT NULL
"""

_serials = itertools.count(1)


def fill(conn: psycopg.Connection[Any], count: int, queue: str = "default",
         ready: bool = True, lanes: int = 1) -> None:  # fmt: skip
    """`count` queued jobs in `queue` (autocommit `conn`), 10,000 a transaction, their
    priorities 0 to `lanes` - 1 in turn (so, when `ready`, in that many lanes)."""
    for first in range(0, count, 10_000):
        base = next(_serials) * 10**12
        n = min(10_000, count - first)
        params = {"queue": queue, "base": base, "count": n, "ready": ready, "lanes": lanes}
        conn.execute(_FILL, params)


WORKER = "census-worker"
GONE = "census-gone"
"""A worker whose lease runs out in each exercise, for the reaper's statements."""
LEASE = 600.0


class Exercise:
    """Each watched statement sent at least once by heartq's own store, as a worker, the
    reaper and the pruner send them: `run` once per state, while recording."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        for worker in (WORKER, GONE):
            store.register_worker(WorkerInfo(worker, "census", 1, ("default",), 50))
        # The keyed claims' jobs, in queues of their own: with concurrency keys and with
        # rate keys (`keyed`), and with a rate key at its limit once one started (`held`:
        # the wait until it has room again).
        keyed = [NewJob("t", "{}", queue="keyed", concurrency_key=f"c{i % 5}",
                        concurrency_limit=1) for i in range(500)]
        keyed += [NewJob("t", "{}", queue="keyed", rate_key=f"r{i % 5}", rate_limit=10_000,
                         rate_period=3600.0) for i in range(500)]
        keyed += [NewJob("t", "{}", queue="held", rate_key="full", rate_limit=1,
                         rate_period=3600.0) for i in range(3)]  # fmt: skip
        store.enqueue(keyed)

    def run(self) -> None:
        store = self.store
        store.enqueue([NewJob("t", "{}") for _ in range(3)])
        store.heartbeat(WORKER, [], LEASE)
        held = list(store.claim(WORKER, ["default"], 10, lease=LEASE))  # in order
        # A job with a fairness key: the claim in order says turns are due, and the claim
        # with turns takes the slots; the next claims of the queue try in order again.
        store.enqueue([NewJob("t", "{}", fair_key="census")])
        store.leases.turns_until.clear()
        held += store.claim(WORKER, ["default"], 10, lease=LEASE)
        store.leases.turns_until.clear()
        held += store.claim(WORKER, ["default", "other"], 10, lease=LEASE)  # in order
        store.enqueue([NewJob("t", "{}", queue="other", fair_key="census")])
        store.leases.turns_until.clear()
        held += store.claim(WORKER, ["default", "other"], 10, lease=LEASE)  # with turns
        store.leases.turns_until.clear()
        held += store.claim(WORKER, ["keyed"], 10, lease=LEASE)
        held += store.claim(WORKER, ["held"], 5, lease=LEASE)
        ahead = store.claim(WORKER, ["default"], 1, lease=LEASE, ahead=4)
        held += ahead
        held += [job for job in ahead.ahead if job.lease in
                 store.start_ahead([j.lease for j in ahead.ahead], LEASE)]  # fmt: skip
        held += store.claim_ids(WORKER, self._queued_ids(5), LEASE)
        leases = [job.lease for job in held]
        store.heartbeat(WORKER, [Renewal(lease) for lease in leases], LEASE, sweep=True)
        store.heartbeat(WORKER, [Renewal(lease) for lease in leases], LEASE)
        store.pulse([PulseReport(lease, Report(progress=Progress(0.5))) for lease in leases])
        store.cancel_requests(WORKER, leases)
        # A job that waits for a running one and a queued one, and the cancel of a queued
        # one, in a queue of their own (no claim or drain look below reads it).
        queued, cancelled = store.enqueue([NewJob("t", "{}", queue="waits")] * 2)
        store.enqueue([NewJob("t", "{}", queue="waits", depends_on=(held[0].id, queued))])
        store.cancel_job(cancelled)
        # A chain whose first job dies: the second is blocked, the third held by it.
        (first,) = store.enqueue([NewJob("t", "{}", queue="waits", max_retries=0)])
        (second,) = store.enqueue([NewJob("t", "{}", queue="waits", depends_on=(first,))])
        store.enqueue([NewJob("t", "{}", queue="waits", depends_on=(second,))])
        store.finish([failed(job, Outcome.FAILED, "census")
                      for job in store.claim_ids(WORKER, [first], LEASE)])  # fmt: skip
        half = len(held) // 2
        store.has_pending(["default"])
        store.has_pending(["idle"])
        store.finish([succeeded(job, None) for job in held[:half]])
        store.release(leases[half:])
        # The reaper: a worker whose lease ran out, with attempts attached and detached.
        store.heartbeat(GONE, [], 0.001)
        lapsed = store.claim(GONE, ["default"], 3, lease=0.001)
        store.heartbeat(GONE, [], 0.001, detach=[job.lease for job in lapsed[:1]])
        later = self.store.clock() + 5
        store.reclaim_expired("lease", now=later)
        store.prune(worker_retention=3600.0, job_retention=0.0, now=later)

    def _queued_ids(self, count: int) -> list[str]:
        with self.store.link.pool.transaction() as conn:
            rows = conn.execute(
                "SELECT id FROM jobs WHERE queue = 'default' AND status = 'queued'"
                " ORDER BY id DESC LIMIT %(n)s", {"n": count}
            ).fetchall()
        return [row["id"] for row in rows]
