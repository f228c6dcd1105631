"""Fencing (I3): a write that carries an old execution_id changes nothing, and neither
does one that carries the current execution id under another worker (a database that
forgot a claim issues its execution id again: docs/design/database-bad-days.md, "A failover that
forgets a claim"; the real failover is tests/integration/test_failover_fencing.py).

Each stale write is tried against each way a lease can go stale; the job is compared
whole (get_job, executions included) before and after. The same writes with the current
lease land, so a refusal is the fence at work, not a write that never does anything.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from heartq.errors import LeaseLost
from heartq.lifecycle.fate import succeeded
from heartq.model import (
    DetectedBy,
    Finish,
    JobStatus,
    Lease,
    Outcome,
    Progress,
    Renewal,
    RenewStatus,
)
from heartq.store import Store

from .support import LEASE, claim_one, enqueue_one, register


def _reaped(store: Store, t0: float) -> tuple[Lease, float]:
    """w1's attempt expired and was reclaimed: the job is queued again."""
    enqueue_one(store, t0, retry_backoff=0.0)
    old = claim_one(store, "w1", t0).lease
    (reclaimed,) = store.reclaim_expired(DetectedBy.LEASE_EXPIRED, now=t0 + LEASE + 1)
    assert reclaimed.job_id == old.job_id
    return old, t0 + LEASE + 2


def _taken_over(store: Store, t0: float) -> tuple[Lease, float]:
    """... and w2 claimed it: a newer attempt holds the lease."""
    old, now = _reaped(store, t0)
    assert claim_one(store, "w2", now, lease=600).execution_id == old.execution_id + 1
    return old, now + 1


def _taken_back(store: Store, t0: float) -> tuple[Lease, float]:
    """... and w1 itself claimed it again: the same worker, a newer attempt (only the
    execution id tells the stale write from the current one)."""
    old, now = _reaped(store, t0)
    assert claim_one(store, "w1", now, lease=600).execution_id == old.execution_id + 1
    return old, now + 1


def _finished_by_another(store: Store, t0: float) -> tuple[Lease, float]:
    """... and w2 finished it."""
    old, now = _taken_over(store, t0)
    current = Lease(old.job_id, store.get_job(old.job_id)["execution_id"])
    done = Finish(current, Outcome.SUCCEEDED, JobStatus.SUCCEEDED)
    assert store.finish([done], now=now) == []
    return old, now + 1


def _stale_worker(store: Store, t0: float) -> tuple[Lease, float]:
    """w1 was found stale and its job reclaimed before its lease even expired; then w2
    took it."""
    enqueue_one(store, t0, retry_backoff=0.0)
    register(store, "w1", t0)
    old = claim_one(store, "w1", t0, lease=600).lease
    (stale,) = store.mark_stale_workers(90, DetectedBy.STALE_WORKER, now=t0 + 100)
    assert [r.job_id for r in stale.reclaimed] == [old.job_id]
    claim_one(store, "w2", t0 + 101, lease=600)
    return old, t0 + 102


def _older_token(store: Store, t0: float) -> tuple[Lease, float]:
    """A forged lease with a token below the current one (w1 pausing two attempts ago)."""
    old, now = _taken_over(store, t0)
    return Lease(old.job_id, 0), now


def _issued_again(store: Store, t0: float) -> tuple[Lease, float]:
    """w1 claimed the job, the database forgot that claim (a failover to an asynchronous
    standby that never received it) and issued the same execution id to w2: w1's lease
    names the current execution, under w1."""
    enqueue_one(store, t0, retry_backoff=0.0)
    current = claim_one(store, "w2", t0, lease=600).lease
    return Lease(current.job_id, current.execution_id, "w1"), t0 + 1


SETUPS: dict[str, Callable[[Store, float], tuple[Lease, float]]] = {
    "reaped": _reaped,
    "taken-over": _taken_over,
    "taken-back-by-the-same-worker": _taken_back,
    "finished-by-another": _finished_by_another,
    "stale-worker-then-taken": _stale_worker,
    "older-token": _older_token,
    "issued-again-to-another-worker": _issued_again,
}


def _complete(store: Store, lease: Lease, now: float) -> bool:
    lost = store.finish(
        [Finish(lease, Outcome.SUCCEEDED, JobStatus.SUCCEEDED, result_json='"stale"')], now=now
    )
    return lost == [lease]


def _fail_retry(store: Store, lease: Lease, now: float) -> bool:
    lost = store.finish(
        [Finish(lease, Outcome.FAILED, JobStatus.QUEUED, error="stale error", retry_delay=0)],
        now=now,
    )
    return lost == [lease]


def _fail_dead(store: Store, lease: Lease, now: float) -> bool:
    lost = store.finish(
        [Finish(lease, Outcome.FAILED, JobStatus.DEAD, error="stale", dead_reason="stale")],
        now=now,
    )
    return lost == [lease]


def _cancelled(store: Store, lease: Lease, now: float) -> bool:
    return store.finish([Finish(lease, Outcome.CANCELLED, JobStatus.CANCELLED)], now=now) == [lease]


def _renew(store: Store, lease: Lease, now: float) -> bool:
    return store.heartbeat("w1", [Renewal(lease)], 600, now=now) == {lease: RenewStatus.LOST}


def _progress(store: Store, lease: Lease, now: float) -> bool:
    renewal = Renewal(lease, Progress(0.99, "stale", "stale progress"))
    return store.heartbeat("w1", [renewal], 600, now=now) == {lease: RenewStatus.LOST}


def _release(store: Store, lease: Lease, now: float) -> bool:
    return store.release([lease], now=now) == [lease]


def _checkpoint(store: Store, lease: Lease, now: float) -> bool:
    with pytest.raises(LeaseLost) as raised:
        store.save_checkpoint(lease, '{"stale": true}', now=now)
    return (raised.value.job_id, raised.value.execution_id) == (
        lease.job_id,
        lease.execution_id,
    )


def _completion(store: Store, lease: Lease, now: float) -> bool:
    """`ctx.transaction()`'s completion (at the database's clock: `now` is not taken)."""
    try:
        with store.completing(lease):
            pass
    except LeaseLost:
        return True
    return False


def _crash(store: Store, lease: Lease, now: float) -> bool:
    return store.crash_attempt(lease, {"reason": "stale"}, DetectedBy.CHILD_EXIT, now=now) is None


WRITES: dict[str, Callable[[Store, Lease, float], bool]] = {
    "finish-complete": _complete,
    "finish-fail-retry": _fail_retry,
    "finish-fail-dead": _fail_dead,
    "finish-cancelled": _cancelled,
    "heartbeat-renew": _renew,
    "heartbeat-progress": _progress,
    "release": _release,
    "save-checkpoint": _checkpoint,
    "completion": _completion,
    "crash-attempt": _crash,
}


@pytest.mark.parametrize("write", WRITES)
@pytest.mark.parametrize("setup", SETUPS)
def test_a_stale_write_changes_nothing(store: Store, t0: float, setup: str, write: str) -> None:
    old, now = SETUPS[setup](store, t0)
    before = store.get_job(old.job_id)
    workers_before = store.list_workers(include_all=True)

    assert WRITES[write](store, old, now), "the stale write was not reported as lost"

    assert store.get_job(old.job_id) == before
    if write.startswith("heartbeat"):  # the registry row may be touched; nothing else
        return
    assert store.list_workers(include_all=True) == workers_before


@pytest.mark.parametrize("write", WRITES)
def test_the_same_write_with_the_current_lease_lands(store: Store, t0: float, write: str) -> None:
    enqueue_one(store, t0)
    lease = claim_one(store, "w1", t0).lease
    before = store.get_job(lease.job_id)
    if write == "save-checkpoint":
        assert store.save_checkpoint(lease, '{"fresh": true}', now=t0 + 1) is RenewStatus.RENEWED
    else:
        assert not WRITES[write](store, lease, t0 + 1), "a current write was refused"
    assert store.get_job(lease.job_id) != before


def test_a_batch_refuses_only_its_stale_writes(store: Store, t0: float) -> None:
    old, now = _taken_over(store, t0)
    enqueue_one(store, now)
    fresh = claim_one(store, "w1", now)
    waiting_since = store.get_job(old.job_id)

    lost = store.finish(
        [
            succeeded(fresh, '"fresh"'),
            Finish(old, Outcome.SUCCEEDED, JobStatus.SUCCEEDED, result_json='"stale"'),
        ],
        now=now + 1,
    )

    assert lost == [old]
    assert store.get_job(fresh.id)["result"] == "fresh"
    assert store.get_job(old.job_id) == waiting_since


def test_a_result_is_saved_by_the_completing_worker_only(store: Store, t0: float) -> None:
    """A job its task's transaction completed keeps its worker: the result that follows is
    fenced on it too, so the attempt of a forgotten claim under the same execution id
    cannot write its result over the one that completed."""
    enqueue_one(store, t0)
    lease = claim_one(store, "w2", t0).lease
    with store.completing(lease):
        pass
    forgotten = Lease(lease.job_id, lease.execution_id, "w1")

    assert store.save_result(forgotten, '"stale"') is False
    assert store.save_result(lease, '"fresh"') is True
    assert store.get_job(lease.job_id)["result"] == "fresh"


def test_a_batch_of_two_workers_is_fenced_per_worker(store: Store, t0: float) -> None:
    """A finish batch whose leases name two workers (a caller's own batch; a worker's
    name only itself): each lands only under its own worker."""
    for _ in range(2):
        enqueue_one(store, t0)
    first = claim_one(store, "w1", t0)
    second = claim_one(store, "w2", t0)
    forged = Lease(second.id, second.execution_id, "w1")
    lost = store.finish(
        [
            succeeded(first, '"w1"'),
            Finish(forged, Outcome.SUCCEEDED, JobStatus.SUCCEEDED, result_json='"forged"'),
            succeeded(second, '"w2"'),
        ],
        now=t0 + 1,
    )

    assert [(x.job_id, x.worker_id) for x in lost] == [(second.id, "w1")]
    assert store.get_job(first.id)["result"] == "w1"
    assert store.get_job(second.id)["result"] == "w2"
