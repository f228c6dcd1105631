"""The claim's rows are read by position (`records.claimed_jobs`, a tuple a row rather
than a dict): every claim statement of either backend returns `records.CLAIMED_COLUMNS`,
in that order, and a claimed job carries each column where it belongs."""

from __future__ import annotations

from typing import Any

import pytest

from heartq.store import Store, records
from heartq.store.sql.store import SqlStore

from .support import new_ids, new_job, register

CLAIMS = ["CLAIM", "CLAIM_ONE_QUEUE", "CLAIM_IN_ORDER", "CLAIM_QUEUES_IN_ORDER", "CLAIM_IDS",
          "CLAIM_KEYED", "CLAIM_RATED"]  # fmt: skip


@pytest.mark.parametrize("name", CLAIMS)
def test_every_claim_returns_the_claimed_columns_in_order(store: Store, name: str) -> None:
    assert isinstance(store, SqlStore)
    d = store.leases.d
    params: dict[str, Any] = {
        "worker_id": "w1", "queues": d.array(["default"]), "queue": "default",
        "ids": d.array(new_ids(1)), "keys": d.array(["k"]), "rate_keys": d.array(["r"]),
        "concurrency_keys": d.array([]), "limit": 1, "claimed": 0, "lease": 30.0,
        "ahead": False,
    }  # fmt: skip
    with d.write() as conn:
        params["now"] = d.clock(conn, None)
        cursor = d.by_position(conn).execute(getattr(d.q, name), params)
        names = tuple(column[0] for column in cursor.description)
        assert cursor.fetchall() == []  # nothing queued: nothing claimed
    assert names == records.CLAIMED_COLUMNS


def test_sqlite_claim_by_turns_returns_the_claimed_columns_then_its_turn(store: Store) -> None:
    """SQLite's claim by turns of one queue returns the claimed columns in order, then
    each job's key, tag and step (`fair.advance` reads them after the claimed ones)."""
    assert isinstance(store, SqlStore)
    d = store.leases.d
    if d.fair is None:
        pytest.skip("PostgreSQL takes its turns in its claim statements")
    params: dict[str, Any] = {"worker_id": "w1", "queue": "default", "limit": 1,
                              "lease": 30.0, "ahead": False}  # fmt: skip
    with d.write() as conn:
        params["now"] = d.clock(conn, None)
        cursor = d.by_position(conn).execute(d.fair.CLAIM_TURNS_ONE_QUEUE, params)
        names = tuple(column[0] for column in cursor.description)
        assert cursor.fetchall() == []
    assert names == (*records.CLAIMED_COLUMNS, "fair_key", "fair_tag", "step")


def test_a_claimed_job_carries_each_column(store: Store, t0: float) -> None:
    """Every field read by position lands in its own place: columns of the same type
    (text, integers, floats) swapped would pass the statement's names only here."""
    register(store, "w1", t0)
    (job_id,) = new_ids(1)
    job = new_job(
        id=job_id, task="t.one", queue="q1", args={"a": 1}, priority=7, max_retries=4,
        retry_backoff=1.5, retry_backoff_max=9.0, meta_json='{"m": 2}', run_at=t0 - 5, chosen=5,
    )  # fmt: skip
    store.enqueue([job], now=t0 - 5)
    (claimed,) = store.claim("w1", ["q1"], 1, 30.0, now=t0)
    assert (claimed.id, claimed.task, claimed.queue) == (job_id, "t.one", "q1")
    assert claimed.args == {"a": 1} and claimed.meta == {"m": 2}
    assert (claimed.attempt, claimed.execution_id, claimed.priority) == (1, 1, 7)
    assert (claimed.max_retries, claimed.retry_backoff, claimed.retry_backoff_max) == (4, 1.5, 9.0)
    assert claimed.run_at == pytest.approx(t0 - 5)
    assert claimed.lease_expires_at == pytest.approx(t0 + 30)
    assert claimed.chosen == 5
    assert claimed.checkpoint is None and claimed.dependency_results is False
    assert claimed.snoozes == 0
    assert claimed.worker_id == "w1" and claimed.lease.worker_id == "w1"
