"""What any correct claim does with jobs enqueued by transactions that overlap it:
PostgreSQL's ready log (docs/design/claim.md, "The claim") and SQLite's claim index alike.

A claim rolled back moves nothing; a job handed back (released, retried) keeps its place
in line by its `run_at` among fresh jobs; a lane (queue, priority) that emptied and was
pruned takes its next job, and none is pruned from under an enqueue in flight; a caller
whose snapshot predates the enqueue (REPEATABLE READ) enqueues into a new queue. SQLite
has no ready log, one writer and no isolation level to choose: the same claims hold
there, most of them trivially, and run on both backends.

What only PostgreSQL's concurrent writers can do is `only_on("postgres")`: a fresh
job is claimed in the order of the transactions that enqueued it whatever its `run_at`
(a transaction that began earlier and committed later; SQLite claims by `run_at`), a job
of a transaction still running below the frontier is claimed once it commits, an
enqueue left open holds up no other enqueuer, the marks a claim leaves are pruned.

What the claim costs (index entries and buffers under a held horizon, lanes walked,
generic plans) is tests/plans' (test_ready_log.py, test_lanes.py).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from heartq.lifecycle.fate import failed
from heartq.model import Outcome
from heartq.store import Store
from heartq.store.sql.base import run
from tests.conftest import only_on

from .support import LEASE, claim_one, enqueue_one, new_job


def claim_all(store: Store, now: float | None = None, queue: str = "default") -> list[str]:
    """The ids of every job a claim of `queue` takes now, in claim order."""
    return [j.id for j in store.claim("w", [queue], 100, LEASE, now=now)]


def claimed_one_at_a_time(store: Store, n: int, now: float) -> list[str]:
    return [claim_one(store, "w", now).id for _ in range(n)]


def marks(store: Store) -> list[dict[str, Any]]:
    """PostgreSQL: the claim marks of the store's lanes, oldest first."""
    with store.link.pool.transaction() as conn:  # type: ignore[attr-defined]
        sql = "SELECT frontier_xid, frontier_id, pending FROM claim_marks ORDER BY made_at"
        return list(conn.execute(sql).fetchall())


class RolledBack(Exception):
    """Raised inside the claim's transaction: it rolls back."""


def claim_rolled_back(store: Store, limit: int) -> int:
    """The store's own claim statement of one queue, run in a write transaction that
    rolls back (a claim whose session dropped before its commit); how many jobs it took
    before that."""
    dialect: Any = store.dialect  # type: ignore[attr-defined]
    params = {"worker_id": "w", "queue": "default", "queues": dialect.array(["default"]),
              "limit": limit, "lease": LEASE, "ahead": False}  # fmt: skip
    with pytest.raises(RolledBack) as rolled, dialect.write() as conn:
        params["now"] = dialect.clock(conn, None)
        taken = run(dialect.by_position(conn), dialect.q.CLAIM_IN_ORDER, params)
        raise RolledBack(len(taken))
    return int(rolled.value.args[0])


def emptied_lanes(store: Store, lanes: int) -> None:
    """`lanes` lanes (priorities 0, 1, ...) each entered by a job, every job claimed."""
    store.enqueue([new_job(priority=p) for p in range(lanes)])
    assert len(store.claim("w", ["default"], lanes, LEASE)) == lanes


# -- on every backend ---------------------------------------------------------------------
def test_a_claim_that_rolled_back_moved_nothing(store: Store) -> None:
    """Its jobs, and on PostgreSQL the mark it wrote in the same statement, are gone
    with it: the next claim takes every job, those it had taken first."""
    ids = store.enqueue([new_job() for _ in range(5)])
    assert claim_rolled_back(store, 3) == 3
    assert sorted(claim_all(store)) == sorted(ids)


def test_a_job_handed_back_keeps_its_place_in_line_by_run_at(store: Store, t0: float) -> None:
    """Within a priority, a job released (at shutdown) or retried is due again at its
    `run_at` (the release's time, the retry's), and is claimed by it among fresh jobs."""
    released = enqueue_one(store, t0)
    taken = claim_one(store, "w1", t0)
    retried = enqueue_one(store, t0, retry_backoff=0.0)
    to_retry = claim_one(store, "w1", t0)
    fresh_1 = enqueue_one(store, t0 + 1)
    assert store.release([taken.lease], now=t0 + 2) == []
    fresh_2 = enqueue_one(store, t0 + 3)
    assert store.finish([failed(to_retry, Outcome.FAILED, "boom")], now=t0 + 4) == []
    fresh_3 = enqueue_one(store, t0 + 5)
    expected = [fresh_1, released, fresh_2, retried, fresh_3]
    assert claimed_one_at_a_time(store, 5, t0 + 6) == expected


def test_a_lane_that_emptied_and_was_pruned_takes_its_next_job(
    store: Store, backend: str
) -> None:
    """The pruner deletes the lanes no claim took from lately that have nothing left
    (PostgreSQL; SQLite has none to prune) and keeps one with a job waiting; an
    enqueue makes a pruned lane again, and the next claim takes its job."""
    emptied_lanes(store, 3)
    (waiting,) = store.enqueue([new_job(priority=7)])
    prune_lanes = store.dialect.prune_lanes  # type: ignore[attr-defined]
    assert prune_lanes(idle=3600.0) == 0  # all taken from lately
    assert prune_lanes(idle=0.0) == (0 if backend == "sqlite" else 3)
    (again,) = store.enqueue([new_job(priority=1)])
    assert claim_all(store) == [waiting, again]


def test_a_lane_is_never_pruned_from_under_an_enqueue_in_flight(
    store: Store, connect: Any
) -> None:
    """An application's transaction enqueues into an empty lane and has not committed:
    the pruner leaves the lane (the enqueue holds it), and the job is claimed once the
    transaction commits. Pruned from under it, the job would wait in a lane no claim
    reads until another enqueue made the lane again."""
    emptied_lanes(store, 1)
    app = connect()
    (job,) = store.enqueue([new_job()], connection=app)
    prune_lanes = store.dialect.prune_lanes  # type: ignore[attr-defined]
    assert prune_lanes(idle=0.0) == 0
    app.commit()
    assert prune_lanes(idle=0.0) == 0  # a job waits in it now
    assert claim_all(store) == [job]


def test_a_caller_whose_snapshot_predates_the_enqueue_enqueues_into_a_new_queue(
    store: Store, connect: Any, backend: str
) -> None:
    """A caller's transaction took its snapshot before the enqueue (PostgreSQL:
    REPEATABLE READ, older than the lane the job enters, which heartq makes and commits
    on its own connection; SQLite: a read transaction) and enqueues into a queue new to
    the database: it commits, and the job is claimed. On PostgreSQL an insert that made
    its own lane failed to serialize every time."""
    app = connect()
    if backend == "sqlite":
        app.execute("BEGIN")
        app.execute("SELECT count(*) FROM sqlite_master").fetchall()  # the snapshot
    else:
        app.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        app.execute("SELECT 1")  # the snapshot, taken before the lane exists
    (job,) = store.enqueue([new_job(queue="fresh", priority=3)], connection=app)
    app.commit()
    assert claim_all(store, queue="fresh") == [job]


# -- PostgreSQL's concurrent writers ------------------------------------------------------
@only_on("postgres")
def test_fresh_jobs_in_the_order_of_their_transactions_whatever_their_run_at(
    store: Store, t0: float
) -> None:
    """Within a priority, fresh jobs are claimed in the order of the transactions that
    enqueued them, even one dated earlier (as a transaction that began earlier and
    committed later dates its jobs), and a job handed back by its `run_at` among them.
    (SQLite, one writer, claims by `run_at`: `second`, `back`, `first` here.)"""
    back = enqueue_one(store, t0 - 20)
    assert store.release([claim_one(store, "w", t0 - 20).lease], now=t0 - 5) == []
    first = enqueue_one(store, t0)
    second = enqueue_one(store, t0 - 10)
    assert claimed_one_at_a_time(store, 3, t0) == [back, first, second]


@only_on("postgres")
def test_a_job_of_a_transaction_running_below_the_frontier_is_claimed_at_its_commit(
    store: Store, connect: Any
) -> None:
    """An application's transaction takes its id, then other jobs are enqueued and
    claimed past it (the frontier moves beyond its id, which the mark lists as pending);
    it enqueues a job and commits, later: the next claim takes that job. A frontier that
    forgot the transactions running below it would never read it."""
    app = connect()
    row = app.execute("SELECT pg_current_xact_id()::text").fetchone()
    assert row is not None
    xid = row[0]  # its id, below everything after
    store.enqueue([new_job() for _ in range(3)])
    assert len(claim_all(store)) == 3
    assert claim_all(store) == []
    mark = marks(store)[-1]
    assert int(mark["frontier_xid"]) > int(xid) and xid in mark["pending"], mark
    (late,) = store.enqueue([new_job()], connection=app)
    app.commit()
    assert claim_all(store) == [late]
    assert xid not in marks(store)[-1]["pending"]  # ended, its job taken: not probed


@only_on("postgres")
def test_an_enqueue_into_an_open_transaction_holds_up_no_other_enqueuer(
    store: Store, connect: Any
) -> None:
    """The first job of a lane enqueued into a caller's transaction that stays open: its
    lane was made beforehand on heartq's own connection, so another enqueue of that lane
    commits meanwhile instead of waiting on the lane's uncommitted row. (SQLite's one
    writer makes every other enqueue wait for the caller's commit, by design.)"""
    others: list[str] = []
    app = connect()
    store.enqueue([new_job(queue="fresh")], connection=app)
    other = threading.Thread(
        target=lambda: others.extend(store.enqueue([new_job(queue="fresh")]))
    )
    other.start()
    other.join(timeout=20)
    finished_while_open = not other.is_alive()
    app.rollback()
    other.join(timeout=20)
    assert finished_while_open and len(others) == 1


@only_on("postgres")
def test_superseded_marks_are_pruned_a_minute_after(store: Store, t0: float) -> None:
    """Each claim that took jobs appends a mark; the pruner deletes those a further
    mark supersedes once a minute old, and keeps the furthest (which a claim reads)."""
    store.enqueue([new_job() for _ in range(4)], now=t0)
    for i in range(4):
        assert len(store.claim("w", ["default"], 1, LEASE, now=t0 + i)) == 1
    made = marks(store)
    assert len(made) >= 4
    store.prune(3600.0, 3600.0, now=t0 + 30)
    assert len(marks(store)) == len(made)  # none a minute old yet
    store.prune(3600.0, 3600.0, now=t0 + 120)
    assert marks(store) == made[-1:]
    store.enqueue([new_job()], now=t0 + 121)
    assert len(claim_all(store, now=t0 + 121)) == 1



@only_on("postgres")
def test_superseded_turns_are_pruned_with_the_marks(store: Store, t0: float) -> None:
    """Each claim that took from more than one lane of a tier appends where its turns
    stand; the pruner keeps each tier's newest (which a claim reads) and deletes the
    others once a minute old."""
    store.enqueue([new_job(fair_key=key) for key in "ab" for _ in range(4)], now=t0)
    for i in range(4):
        assert len(store.claim("w", ["default"], 2, LEASE, now=t0 + i)) == 2

    def turns() -> list[tuple[str, int]]:
        with store.link.pool.transaction() as conn:  # type: ignore[attr-defined]
            sql = "SELECT fair_key, remaining FROM claim_turns ORDER BY made_at"
            return [(r["fair_key"], r["remaining"]) for r in conn.execute(sql).fetchall()]

    made = turns()
    assert made == [("b", 0)] * 4  # each claim of two: a, then b, whose turn is over
    store.prune(3600.0, 3600.0, now=t0 + 30)
    assert turns() == made  # none a minute old yet
    store.prune(3600.0, 3600.0, now=t0 + 120)
    assert turns() == made[-1:]
