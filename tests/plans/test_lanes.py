"""The lanes of the ready log (PostgreSQL; docs/DESIGN.md, "The claim"): a claim walks
only lanes with work, at most as many as it takes, highest priority first; a lane that
emptied goes away, never from under an enqueue in flight; an enqueue into a caller's
transaction needs nothing its snapshot cannot see.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from bench import held_leases
from heartq.model import NewJob
from heartq.store.postgres import PostgresStore
from heartq.store.postgres import queries as pg_q
from heartq.store.postgres.connection import parse_url

LEASE = 600.0


def _claim_params(limit: int) -> dict[str, Any]:
    return {"worker_id": "w", "queue": "default", "queues": ["default"], "limit": limit,
            "lease": LEASE, "now": None, "ahead": False}  # fmt: skip


def _count(pg_store: PostgresStore, table: str) -> int:
    with pg_store.link.pool.transaction() as conn:
        row = conn.execute(f"SELECT count(*) AS n FROM {table}").fetchone()  # type: ignore[arg-type]
    assert row is not None
    return int(row["n"])


def _emptied_lanes(pg_store: PostgresStore, lanes: int) -> None:
    """`lanes` lanes (priorities 0, 1, ...) each entered by a job, every job claimed."""
    pg_store.enqueue([NewJob("t", "{}", priority=p) for p in range(lanes)])
    assert len(pg_store.claim("w", ["default"], lanes, lease=LEASE)) == lanes


@pytest.mark.parametrize("lanes", [1, 100, 1000])
def test_an_idle_claim_costs_the_same_however_many_lanes_emptied(
    pg_store: PostgresStore, lanes: int
) -> None:
    """A claim that finds nothing reads what it read with one lane, once the emptied
    lanes are pruned (a claim of 1,000 lanes' queue read each lane's mark and walked it:
    35 ms against 0.9 ms), and writes no mark for a lane without work (idle polls wrote
    one a lane a second)."""
    _emptied_lanes(pg_store, lanes)
    assert pg_store.dialect.prune_lanes(idle=0.0) == lanes
    assert _count(pg_store, "lanes") == 0
    with pg_store.link.pool.autocommit() as conn:  # as autovacuum soon does, a small table
        conn.execute("VACUUM lanes")
    marks = _count(pg_store, "claim_marks")
    params = _claim_params(10)
    buffers, entries = held_leases.measure(pg_store.link.url, pg_q.CLAIM_ONE_QUEUE, params)
    for _ in range(10):
        assert pg_store.claim("w", ["default"], 10, lease=LEASE) == []
    assert _count(pg_store, "claim_marks") == marks
    # Measured: 103, 108 and 113 buffers with 1, 100 and 1,000 lanes pruned, no entry.
    assert buffers <= 150 and entries <= 2, (buffers, entries)


@pytest.mark.parametrize("lanes", [1, 1000])
def test_a_claim_walks_only_the_lanes_it_takes_from(pg_store: PostgresStore, lanes: int) -> None:
    """With a job waiting in each of 1,000 lanes (priorities), a claim of ten reads the
    ten highest lanes, not all of them; and before the pruner ran, lanes that emptied
    cost a claim a probe or two each, and no mark."""
    pg_store.enqueue([NewJob("t", "{}", priority=p) for p in range(lanes)])
    taken = pg_store.claim("w", ["default"], 1, lease=LEASE)
    assert [j.priority for j in taken] == [lanes - 1]  # the highest priority first
    buffers, _ = held_leases.measure(pg_store.link.url, pg_q.CLAIM_ONE_QUEUE, _claim_params(10))
    # Measured: 257 buffers with one lane (one job left: nothing), 423 with 1,000.
    assert buffers <= 600, buffers


def test_a_lane_that_emptied_goes_and_comes_back_with_its_next_job(
    pg_store: PostgresStore,
) -> None:
    """The pruner deletes the lanes no claim took from lately that have nothing left,
    and keeps one with a job waiting; an enqueue makes a pruned lane again, and the next
    claim takes its job from the lane's last frontier on."""
    _emptied_lanes(pg_store, 3)
    (waiting,) = pg_store.enqueue([NewJob("t", "{}", priority=7)])
    assert pg_store.dialect.prune_lanes(idle=3600.0) == 0  # all taken from lately
    assert pg_store.dialect.prune_lanes(idle=0.0) == 3
    with pg_store.link.pool.transaction() as conn:
        left = conn.execute("SELECT queue, priority FROM lanes").fetchall()
    assert left == [{"queue": "default", "priority": 7}]
    (again,) = pg_store.enqueue([NewJob("t", "{}", priority=1)])
    claimed = pg_store.claim("w", ["default"], 10, lease=LEASE)
    assert sorted(j.id for j in claimed) == sorted([waiting, again])


def test_a_lane_is_never_pruned_from_under_an_enqueue_in_flight(pg_store: PostgresStore) -> None:
    """An application's transaction enqueues into an empty lane and has not committed:
    the pruner leaves the lane (the enqueue holds it), and the job is claimed once the
    transaction commits. Pruned from under it, the job would wait in a lane no claim
    reads until another enqueue made the lane again."""
    _emptied_lanes(pg_store, 1)
    conninfo, _ = parse_url(pg_store.link.url)
    with psycopg.connect(conninfo) as app:
        (job,) = pg_store.enqueue([NewJob("t", "{}")], connection=app)
        assert pg_store.dialect.prune_lanes(idle=0.0) == 0
        app.commit()
    assert pg_store.dialect.prune_lanes(idle=0.0) == 0  # a job waits in it now
    assert [j.id for j in pg_store.claim("w", ["default"], 10, lease=LEASE)] == [job]


def test_a_repeatable_read_caller_enqueues_into_a_new_lane(pg_store: PostgresStore) -> None:
    """A caller's REPEATABLE READ transaction whose snapshot is older than the lane its
    job enters (made, committed, on heartq's own connection) enqueues and commits: its
    insert makes no lane of its own, which that snapshot cannot see (it failed every time
    to serialize: `could not serialize access due to concurrent update`)."""
    conninfo, _ = parse_url(pg_store.link.url)
    with psycopg.connect(conninfo) as app:
        app.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        app.execute("SELECT 1")  # the snapshot, taken before the lane exists
        (job,) = pg_store.enqueue([NewJob("t", "{}", queue="fresh", priority=3)], connection=app)
        app.commit()
    assert [j.id for j in pg_store.claim("w", ["fresh"], 10, lease=LEASE)] == [job]
