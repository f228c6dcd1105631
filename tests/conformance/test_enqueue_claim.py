"""Enqueue and claim: what goes in, and who gets what, in which order."""

from __future__ import annotations

import sqlite3

import pytest

from heartq.errors import DuplicateJob
from heartq.lifecycle.fate import failed
from heartq.model import JobStatus, Outcome, Renewal
from heartq.store import Store

from .support import LEASE, at, claim_one, enqueue_one, new_ids, new_job


def test_enqueue_one_stores_every_field(store: Store, t0: float) -> None:
    (job_id,) = store.enqueue(
        [new_job("resize", {"path": "a.png", "n": 3}, queue="images", priority=7, max_retries=5)],
        now=t0,
    )
    job = store.get_job(job_id)
    assert job["id"] == job_id
    assert job["task"] == "resize"
    assert job["queue"] == "images"
    assert job["args"] == {"path": "a.png", "n": 3}
    assert job["priority"] == 7
    assert job["max_retries"] == 5
    assert job["status"] == JobStatus.QUEUED
    assert job["attempts"] == 0
    assert job["execution_id"] == 0
    assert at(job["created_at"], t0)
    assert at(job["run_at"], t0)
    for empty in ("started_at", "finished_at", "worker_id", "lease_expires_at", "heartbeat_at"):
        assert job[empty] is None, empty
    for empty in ("checkpoint", "result", "error", "dead_reason"):
        assert job[empty] is None, empty
    assert job["executions"] == []


def test_enqueue_many_returns_ids_in_order(store: Store, t0: float) -> None:
    jobs = [new_job("t", {"i": i}) for i in range(50)]
    ids = store.enqueue(jobs, now=t0)
    assert len(ids) == 50
    assert len(set(ids)) == 50
    for i, job_id in enumerate(ids):
        assert store.get_job(job_id)["args"] == {"i": i}
    assert store.enqueue([], now=t0) == []


def test_enqueue_keeps_a_caller_supplied_id(store: Store, t0: float) -> None:
    (own,) = new_ids(1)
    assert store.enqueue([new_job(id=own)], now=t0) == [own]
    assert store.get_job(own)["status"] == JobStatus.QUEUED


def test_an_id_already_taken_is_a_duplicate_job(store: Store, t0: float) -> None:
    """Both enqueue paths (PostgreSQL's one-statement insert for plain jobs, the
    transaction for the others) say the same: `DuplicateJob`, nothing stored."""
    taken, fresh = new_ids(2)
    store.enqueue([new_job(id=taken)], now=t0)
    with pytest.raises(DuplicateJob, match="already exists"):
        store.enqueue([new_job(id=taken)], now=t0)
    with pytest.raises(DuplicateJob, match="already exists"):
        store.enqueue([new_job(id=fresh), new_job(id=taken, run_at=t0 + 5)], now=t0)
    assert [j["id"] for j in store.list_jobs()] == [taken]


def test_enqueue_many_is_one_transaction(store: Store, t0: float) -> None:
    """A batch that cannot be stored whole stores nothing (here: an id already taken).
    Which error is not specified here: the point is that none of the batch lands."""
    taken, *fresh = new_ids(3)
    store.enqueue([new_job(id=taken)], now=t0)
    batch = [new_job(id=fresh[0]), new_job(id=fresh[1]), new_job(id=taken)]
    with pytest.raises(Exception):  # noqa: B017 - any error; what matters is below
        store.enqueue(batch, now=t0)
    assert [j["id"] for j in store.list_jobs()] == [taken]


def test_delay_sets_run_at_and_negative_delay_means_now(store: Store, t0: float) -> None:
    later = enqueue_one(store, t0, delay=90.5)
    past = enqueue_one(store, t0, delay=-10)
    assert at(store.get_job(later)["run_at"], t0 + 90.5)
    assert at(store.get_job(past)["run_at"], t0)


# Enqueued oldest first, ties in id order: within a priority PostgreSQL claims a job
# enqueued runnable in the order of the transactions that enqueued them (the ready log),
# SQLite by `run_at` then id; here the two agree (test_ready_log.py: where they do not).
ORDER_CASES = [
    # (name, priority, enqueued at t0 + offset)
    ("neg-oldest", -1, -100.0),
    ("p0-old", 0, -20.0),
    ("p0-tie-a", 0, -10.0),
    ("p0-tie-b", 0, -10.0),
    ("p0-new", 0, -5.0),
    ("p1-late", 1, 0.0),
]
_NAMES = sorted(name for name, _, _ in ORDER_CASES)
ID = dict(zip(_NAMES, new_ids(len(_NAMES)), strict=True))
"""Each case's job id: made in the order of the names, so the ids sort as the names do."""
EXPECTED_ORDER = [
    ID[name] for name in ("p1-late", "p0-old", "p0-tie-a", "p0-tie-b", "p0-new", "neg-oldest")
]


def _enqueue_order_cases(store: Store, t0: float) -> None:
    for name, priority, offset in ORDER_CASES:
        store.enqueue([new_job(id=ID[name], priority=priority)], now=t0 + offset)


def test_claim_order_is_priority_desc_then_run_at_then_id(store: Store, t0: float) -> None:
    _enqueue_order_cases(store, t0)
    order = [claim_one(store, "w1", t0).id for _ in EXPECTED_ORDER]
    assert order == EXPECTED_ORDER
    assert store.claim("w1", ["default"], 10, LEASE, now=t0) == []


@pytest.mark.parametrize("limit", [1, 2, 3, 5, 6])
def test_claim_takes_the_best_limit_jobs(store: Store, t0: float, limit: int) -> None:
    _enqueue_order_cases(store, t0)
    claimed = store.claim("w1", ["default"], limit, LEASE, now=t0)
    assert {c.id for c in claimed} == set(EXPECTED_ORDER[:limit])


def test_claim_limit(store: Store, t0: float) -> None:
    store.enqueue([new_job() for _ in range(10)], now=t0)
    assert store.claim("w1", ["default"], 0, LEASE, now=t0) == []
    assert len(store.claim("w1", ["default"], 3, LEASE, now=t0)) == 3
    assert len(store.claim("w1", ["default"], 100, LEASE, now=t0)) == 7
    assert store.claim("w1", ["default"], 100, LEASE, now=t0) == []


def test_a_callable_limit_is_read_once_the_claim_has_the_database(store: Store, t0: float) -> None:
    """A worker passes its free slots as a callable: read once, inside the claim's write
    (on SQLite with the write lock held, so that slots freed while the claim waited for
    it are filled by this claim), and the claim takes that many."""
    store.enqueue([new_job() for _ in range(10)], now=t0)
    locked_at_read: list[bool] = []

    def free_slots() -> int:
        locked_at_read.append(_sqlite_write_locked(store))
        return 4

    assert len(store.claim("w1", ["default"], free_slots, LEASE, now=t0)) == 4
    assert locked_at_read == [store.link.url.startswith("sqlite")]
    assert len(store.claim("w1", ["default"], lambda: 0, LEASE, now=t0)) == 0
    assert len(store.claim("w1", ["default"], lambda: 100, LEASE, now=t0)) == 6


def _sqlite_write_locked(store: Store) -> bool:
    """Whether another connection is refused SQLite's write lock at once (False for
    PostgreSQL, which has none)."""
    if not store.link.url.startswith("sqlite"):
        return False
    other = sqlite3.connect(store.link.url.removeprefix("sqlite:///"), timeout=0)
    try:
        other.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        assert "locked" in str(exc)
        return True
    finally:
        other.close()
    return False


def test_claim_only_from_the_workers_queues(store: Store, t0: float) -> None:
    ids = {q: enqueue_one(store, t0, queue=q) for q in ("a", "b", "c")}
    assert store.claim("w1", [], 10, LEASE, now=t0) == []
    assert store.claim("w1", ["nope"], 10, LEASE, now=t0) == []
    claimed = store.claim("w1", ["a", "c"], 10, LEASE, now=t0)
    assert {c.id for c in claimed} == {ids["a"], ids["c"]}
    assert {c.queue for c in claimed} == {"a", "c"}
    assert store.get_job(ids["b"])["status"] == JobStatus.QUEUED


def test_claim_waits_for_run_at(store: Store, t0: float) -> None:
    delayed = enqueue_one(store, t0, delay=60)
    assert store.claim("w1", ["default"], 10, LEASE, now=t0 + 59) == []
    assert store.get_job(delayed)["status"] == JobStatus.QUEUED
    assert claim_one(store, "w1", t0 + 60).id == delayed


def test_claim_sets_the_lease_and_opens_an_execution(store: Store, t0: float) -> None:
    job_id = enqueue_one(store, t0, task="work", args={"x": 1}, queue="q", max_retries=2)
    claimed = claim_one(store, "w1", t0 + 1, lease=45, queues=("q",))
    assert claimed.id == job_id
    assert claimed.task == "work"
    assert claimed.queue == "q"
    assert claimed.args == {"x": 1}
    assert claimed.attempt == 1
    assert claimed.execution_id == 1
    assert claimed.max_retries == 2
    assert claimed.checkpoint is None
    assert claimed.lease_expires_at == pytest.approx(t0 + 46)
    assert claimed.lease.job_id == job_id and claimed.lease.execution_id == 1
    job = store.get_job(job_id)
    assert job["status"] == JobStatus.RUNNING
    assert job["worker_id"] == "w1"
    assert job["attempts"] == 1
    assert job["execution_id"] == 1
    assert at(job["lease_expires_at"], t0 + 46)
    assert at(job["started_at"], t0 + 1)
    (execution,) = job["executions"]
    assert execution["execution_id"] == 1
    assert execution["worker_id"] == "w1"
    assert at(execution["started_at"], t0 + 1)
    assert execution["ended_at"] is None
    assert execution["outcome"] is None
    assert execution["crash"] is None


def test_execution_id_increments_with_every_attempt(store: Store, t0: float) -> None:
    """Failed, crashed and released attempts all leave a new, higher fencing token."""
    job_id = enqueue_one(store, t0, retry_backoff=0.0)
    first = claim_one(store, "w1", t0)
    assert (first.execution_id, first.attempt) == (1, 1)
    assert store.finish([failed(first, Outcome.FAILED, "boom")], now=t0 + 1) == []

    second = claim_one(store, "w2", t0 + 2)
    assert (second.execution_id, second.attempt) == (2, 2)
    (reclaimed,) = store.reclaim_expired("lease_expired", now=t0 + 2 + LEASE + 1)
    assert reclaimed.job_id == job_id

    third = claim_one(store, "w3", t0 + 100)
    assert (third.execution_id, third.attempt) == (3, 3)
    assert store.release([third.lease], now=t0 + 101) == []

    fourth = claim_one(store, "w1", t0 + 102)
    assert (fourth.execution_id, fourth.attempt) == (4, 3)  # a release is not an attempt
    job = store.get_job(job_id)
    assert [e["execution_id"] for e in job["executions"]] == [1, 2, 3, 4]
    assert [e["worker_id"] for e in job["executions"]] == ["w1", "w2", "w3", "w1"]


def test_a_running_job_is_not_claimed_again(store: Store, t0: float) -> None:
    enqueue_one(store, t0)
    claim_one(store, "w1", t0)
    assert store.claim("w2", ["default"], 10, LEASE, now=t0 + 1) == []
    # not even once its lease has expired: only a reclaim puts it back
    assert store.claim("w2", ["default"], 10, LEASE, now=t0 + LEASE * 10) == []


def test_checkpoint_is_handed_to_the_next_claim(store: Store, t0: float) -> None:
    job_id = enqueue_one(store, t0, retry_backoff=0.0)
    first = claim_one(store, "w1", t0)
    assert first.checkpoint is None
    store.save_checkpoint(first.lease, '{"done": 10}', now=t0 + 1)
    assert store.get_job(job_id)["checkpoint"] == {"done": 10}
    store.finish([failed(first, Outcome.FAILED, "boom")], now=t0 + 2)

    second = claim_one(store, "w2", t0 + 3)
    assert second.checkpoint == {"done": 10}
    store.save_checkpoint(second.lease, '{"done": 20}', now=t0 + 4)
    store.heartbeat("w2", [Renewal(second.lease)], LEASE, now=t0 + 5)

    # a crash (lease expired) hands the checkpoint on too
    store.reclaim_expired("lease_expired", now=t0 + 5 + LEASE + 1)
    third = claim_one(store, "w3", t0 + 1000)
    assert third.checkpoint == {"done": 20}
