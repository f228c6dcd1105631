"""What the lanes of the ready log cost (PostgreSQL; docs/design/claim.md, "The claim"): a claim
walks only lanes with work, at most as many as it takes, highest priority first, and an
idle claim reads as much with 1,000 lanes emptied and pruned as with one. That a pruned
lane takes its next job, that none is pruned from under an enqueue in flight and that a
REPEATABLE READ caller enqueues into a new lane is tests/conformance/test_ready_log.py's.
"""

from __future__ import annotations

from typing import Any

import pytest

from bench import held_leases
from heartq.model import NewJob
from heartq.store.postgres import PostgresStore
from heartq.store.postgres import queries as pg_q

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
    buffers, entries = held_leases.measure(pg_store.link.url, pg_q.CLAIM_IN_ORDER, params)
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
    buffers, _ = held_leases.measure(pg_store.link.url, pg_q.CLAIM_IN_ORDER, _claim_params(10))
    # Measured: 257 buffers with one lane (one job left: nothing), 423 with 1,000.
    assert buffers <= 600, buffers




@pytest.mark.parametrize("keys", [1, 1000])
def test_a_claim_reads_the_keys_whose_turn_comes_not_every_key(
    pg_store: PostgresStore, keys: int
) -> None:
    """With 1,000 fairness keys waiting (a lane each, analyzed), a claim of ten reads the
    ten lanes whose turn comes next, as with one key; turns by virtual time read every
    key's lane and mark: 5,174 buffers at 1,000 keys, 24,748 at 5,000
    (`python -m bench.fair_keys`)."""
    jobs = max(40, 2 * keys)
    pg_store.enqueue([NewJob("t", "{}", fair_key=f"k{i % keys}") for i in range(jobs)])
    with pg_store.link.pool.autocommit() as conn:
        conn.execute("ANALYZE")
    for _ in range(3):
        assert len(pg_store.claim("w", ["default"], 10, lease=LEASE)) == 10
    buffers, _ = held_leases.measure(pg_store.link.url, pg_q.CLAIM_ONE_QUEUE, _claim_params(10))
    # Measured: 231 buffers with one key, 381 with 1,000.
    assert buffers <= 600, buffers
