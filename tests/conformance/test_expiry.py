"""A job's expiry (`expires=`, schema v33) as each backend stores it: dated from the
enqueue on the store's clock (as a delay is), read back by `get_job`, and returned by
every claim as the seconds left at the claim's statement (`expires_in`), which the
claimed job turns into a deadline on the worker's monotonic clock (`expires_by`). A job
without one never expires. How a worker ends a job past it: `test_expired_end`, and
tests/integration/test_expiry.py through real workers."""

from __future__ import annotations

import time

import pytest

from heartq.lifecycle import fate
from heartq.model import DependencyFailure, JobStatus, Outcome
from heartq.store import Store
from heartq.timeutil import iso

from .support import new_ids, new_job, register


def test_the_expiry_is_stored_from_the_enqueue(store: Store, t0: float) -> None:
    (job_id,) = store.enqueue([new_job(expires_in=90.0)], now=t0)
    (plain,) = store.enqueue([new_job()], now=t0)
    doc = store.get_job(job_id)
    assert doc is not None and doc["expires_at"] == iso(t0 + 90.0)
    other = store.get_job(plain)
    assert other is not None and other["expires_at"] is None


def test_a_unique_and_a_linked_job_store_it_too(store: Store, t0: float) -> None:
    (first,) = store.enqueue([new_job(expires_in=10.0, unique_key="u")], now=t0)
    (second,) = store.enqueue([new_job(expires_in=20.0, depends_on=(first,))], now=t0)
    for job_id, seconds in ((first, 10.0), (second, 20.0)):
        doc = store.get_job(job_id)
        assert doc is not None and doc["expires_at"] == iso(t0 + seconds)


def test_the_claim_returns_the_seconds_left(store: Store, t0: float) -> None:
    register(store, "w1", t0)
    soon, never = new_ids(2)
    store.enqueue([new_job(id=soon, expires_in=30.0, run_at=t0 - 1)], now=t0 - 10)
    store.enqueue([new_job(id=never, run_at=t0 - 1)], now=t0 - 10)
    before = time.monotonic()
    jobs = {job.id: job for job in store.claim("w1", ["default"], 2, 30.0, now=t0)}
    after = time.monotonic()
    assert jobs[never].expires_by is None
    expires_by = jobs[soon].expires_by
    assert expires_by is not None  # 30 s from the enqueue at t0 - 10: 20 s left at t0
    assert before + 20.0 - 0.01 <= expires_by <= after + 20.0 + 0.01


@pytest.mark.parametrize("ahead", [False, True])
def test_a_claim_ahead_and_by_id_return_it(store: Store, t0: float, ahead: bool) -> None:
    register(store, "w1", t0)
    (job_id,) = new_ids(1)
    store.enqueue([new_job(id=job_id, expires_in=5.0, run_at=t0 - 1)], now=t0 - 10)
    if ahead:
        claim = store.claim("w1", ["default"], 0, 30.0, ahead=1, now=t0)
        (job,) = claim.ahead
    else:
        (job,) = store.claim_ids("w1", [job_id], 30.0, now=t0)
    assert job.expires_by is not None and job.expires_by <= time.monotonic()  # 5 s past


def test_an_expired_job_ends_cancelled_and_uncounted(store: Store, t0: float) -> None:
    register(store, "w1", t0)
    (job_id,) = new_ids(1)
    store.enqueue([new_job(id=job_id, expires_in=1.0, run_at=t0 - 1)], now=t0 - 10)
    (job,) = store.claim("w1", ["default"], 1, 30.0, now=t0)
    finish = fate.decide(job, fate.expired_end(9.0), cancel_requested=False)
    assert fate.is_expiry(finish)
    store.finish([finish], now=t0 + 1)
    doc = store.get_job(job_id)
    assert doc is not None
    assert doc["status"] == JobStatus.CANCELLED.value and doc["attempts"] == 0
    assert doc["error"].startswith(fate.EXPIRED_PREFIX)
    (execution,) = doc["executions"]
    assert execution["outcome"] == Outcome.RELEASED.value


def test_a_cancel_request_does_not_count_it_either(store: Store, t0: float) -> None:
    register(store, "w1", t0)
    (job_id,) = new_ids(1)
    store.enqueue([new_job(id=job_id, expires_in=1.0, run_at=t0 - 1)], now=t0 - 10)
    (job,) = store.claim("w1", ["default"], 1, 30.0, now=t0)
    finish = fate.decide(job, fate.expired_end(9.0), cancel_requested=True)
    store.finish([finish], now=t0 + 1)
    doc = store.get_job(job_id)
    assert doc is not None and (doc["status"], doc["attempts"]) == ("cancelled", 0)


def test_its_dependents_follow_it_as_a_cancelled_dependency(store: Store, t0: float) -> None:
    """An expired job is a cancelled one to its dependents (store/sql/dependencies.py):
    one that runs anyway is queued, the others are cancelled with it."""
    register(store, "w1", t0)
    a, b, c = new_ids(3)
    store.enqueue([new_job(id=a, expires_in=1.0, run_at=t0 - 1)], now=t0 - 10)
    store.enqueue([new_job(id=b, depends_on=(a,))], now=t0 - 10)
    store.enqueue(
        [new_job(id=c, depends_on=(a,), on_dependency_failure=DependencyFailure.RUN)],
        now=t0 - 10,
    )
    (job,) = store.claim("w1", ["default"], 1, 30.0, now=t0)
    store.finish([fate.decide(job, fate.expired_end(9.0), cancel_requested=False)], now=t0 + 1)
    assert store.get_job(b)["status"] == "cancelled"
    assert store.get_job(c)["status"] == "queued"


def test_a_replay_drops_the_expiry(store: Store, t0: float) -> None:
    """A dead job replayed (an operator's ask to run it now) expires no more: its expiry
    passed long ago, and the replay would otherwise cancel it at once."""
    register(store, "w1", t0)
    (job_id,) = new_ids(1)
    store.enqueue([new_job(id=job_id, expires_in=60.0, max_retries=0)], now=t0 - 10)
    (job,) = store.claim("w1", ["default"], 1, 30.0, now=t0)
    store.finish([fate.decide(job, fate.AttemptEnd(Outcome.FAILED, error="x"), False)], now=t0)
    assert store.get_job(job_id)["status"] == "dead"
    store.replay_dead([job_id], now=t0 + 100)
    assert store.get_job(job_id)["expires_at"] is None
    (again,) = store.claim("w1", ["default"], 1, 30.0, now=t0 + 101)
    assert again.expires_by is None
