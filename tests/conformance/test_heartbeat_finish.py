"""Heartbeat, checkpoints, finish and release: the writes of a running attempt."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from heartq.lifecycle.fate import cancelled, failed, succeeded
from heartq.model import (
    ClaimedJob,
    Finish,
    JobStatus,
    Lease,
    Outcome,
    Progress,
    Renewal,
    RenewStatus,
)
from heartq.store import Store

from .support import LEASE, at, claim_one, enqueue_one, new_ids, register, worker


def test_heartbeat_renews_the_lease_and_the_worker(store: Store, t0: float) -> None:
    register(store, "w1", t0)
    job_id = enqueue_one(store, t0)
    job = claim_one(store, "w1", t0)
    answers = store.heartbeat("w1", [Renewal(job.lease)], 60.0, now=t0 + 20)
    assert answers == {job.lease: RenewStatus.RENEWED}
    after = store.get_job(job_id)
    assert at(after["lease_expires_at"], t0 + 80)
    assert at(after["heartbeat_at"], t0 + 20)
    assert after["status"] == JobStatus.RUNNING
    assert at(worker(store, "w1")["last_heartbeat_at"], t0 + 20)
    # a renewed lease is not reaped where the first one would have been
    assert store.reclaim_expired("lease_expired", now=t0 + LEASE + 1) == []


def test_heartbeat_without_jobs_touches_the_worker(store: Store, t0: float) -> None:
    register(store, "w1", t0)
    assert store.heartbeat("w1", [], LEASE, now=t0 + 7) == {}
    assert at(worker(store, "w1")["last_heartbeat_at"], t0 + 7)


def test_the_worker_row_records_the_abandoned_attempts_of_the_worker(
    store: Store, t0: float
) -> None:
    """The worker's row keeps the count of attempts whose code it abandoned (their end
    decided, their code still running), written by its pulse when it changes; a
    heartbeat leaves it as it is. A stopped worker runs no code: shown 0."""
    register(store, "w1", t0)
    register(store, "w2", t0)
    assert {w["id"]: w["abandoned"] for w in store.list_workers()} == {"w1": 0, "w2": 0}
    job = claim_one(store, "w1", enqueue_one(store, t0) and t0)
    store.record_abandoned("w1", 2)
    store.record_abandoned("w2", 1)
    answers = store.heartbeat("w1", [Renewal(job.lease)], LEASE, now=t0 + 1)
    assert answers == {job.lease: RenewStatus.RENEWED}
    assert {w["id"]: w["abandoned"] for w in store.list_workers()} == {"w1": 2, "w2": 1}
    store.record_abandoned("w1", 0)  # its code returned
    store.stop_worker("w2", now=t0 + 3)
    everyone = {w["id"]: w["abandoned"] for w in store.list_workers(include_all=True)}
    assert everyone == {"w1": 0, "w2": 0}


def test_heartbeat_stores_progress(store: Store, t0: float) -> None:
    job_id = enqueue_one(store, t0)
    job = claim_one(store, "w1", t0)
    store.heartbeat("w1", [Renewal(job.lease, Progress(0.25, "clone", "cloning"))], LEASE, now=t0)
    assert store.get_job(job_id)["progress"] == {
        "value": 0.25,
        "stage": "clone",
        "message": "cloning",
    }
    # a renewal without progress keeps the last progress
    store.heartbeat("w1", [Renewal(job.lease)], LEASE, now=t0 + 1)
    assert store.get_job(job_id)["progress"]["stage"] == "clone"
    store.heartbeat("w1", [Renewal(job.lease, Progress(value=1.0))], LEASE, now=t0 + 2)
    assert store.get_job(job_id)["progress"] == {"value": 1.0, "stage": None, "message": None}


def test_heartbeat_answers_lost_for_a_reclaimed_job(store: Store, t0: float) -> None:
    enqueue_one(store, t0)
    enqueue_one(store, t0)
    a = claim_one(store, "w1", t0, lease=10)
    b = claim_one(store, "w1", t0, lease=100)
    (reclaimed,) = store.reclaim_expired("lease_expired", now=t0 + 11)
    assert reclaimed.job_id == a.id
    answers = store.heartbeat("w1", [Renewal(a.lease), Renewal(b.lease)], 100, now=t0 + 12)
    assert answers == {a.lease: RenewStatus.LOST, b.lease: RenewStatus.RENEWED}
    # the lost job stays as the reaper left it
    assert store.get_job(a.id)["status"] == JobStatus.QUEUED
    assert store.get_job(a.id)["lease_expires_at"] is None


def test_heartbeat_answers_lost_for_an_unknown_job(store: Store, t0: float) -> None:
    ghost = Lease(new_ids(1)[0], 1)  # an id as heartq makes them, of no job stored
    assert store.heartbeat("w1", [Renewal(ghost)], LEASE, now=t0) == {ghost: RenewStatus.LOST}


def test_heartbeat_answers_cancel_requested_and_still_renews(store: Store, t0: float) -> None:
    job_id = enqueue_one(store, t0)
    job = claim_one(store, "w1", t0)
    store.cancel_job(job_id, now=t0 + 1)
    answers = store.heartbeat("w1", [Renewal(job.lease)], LEASE, now=t0 + 2)
    assert answers == {job.lease: RenewStatus.CANCEL_REQUESTED}
    assert at(store.get_job(job_id)["lease_expires_at"], t0 + 2 + LEASE)
    assert store.save_checkpoint(job.lease, "{}", now=t0 + 3) is RenewStatus.CANCEL_REQUESTED


def test_save_checkpoint(store: Store, t0: float) -> None:
    job_id = enqueue_one(store, t0)
    job = claim_one(store, "w1", t0)
    assert store.save_checkpoint(job.lease, '{"page": 3}', now=t0 + 1) is RenewStatus.RENEWED
    assert store.get_job(job_id)["checkpoint"] == {"page": 3}
    store.save_checkpoint(job.lease, '{"page": 4, "seen": ["a", "b"]}', now=t0 + 2)
    assert store.get_job(job_id)["checkpoint"] == {"page": 4, "seen": ["a", "b"]}


# -- finish: one row per way an attempt can end ------------------------------------------


@dataclass(frozen=True)
class FinishCase:
    name: str
    make: Callable[[ClaimedJob], Finish]
    max_retries: int
    status: JobStatus
    outcome: Outcome
    result: Any = None
    error: str | None = None
    dead_reason_starts: str | None = None


FINISH_CASES = [
    FinishCase(
        "success",
        lambda job: succeeded(job, '{"files": 120}'),
        3,
        JobStatus.SUCCEEDED,
        Outcome.SUCCEEDED,
        result={"files": 120},
    ),
    FinishCase(
        "success-without-result",
        lambda job: succeeded(job, None),
        3,
        JobStatus.SUCCEEDED,
        Outcome.SUCCEEDED,
    ),
    FinishCase(
        "fail-retry",
        lambda job: failed(job, Outcome.FAILED, "Traceback...\nValueError: boom"),
        3,
        JobStatus.QUEUED,
        Outcome.FAILED,
        error="Traceback...\nValueError: boom",
    ),
    FinishCase(
        "fail-dead",
        lambda job: failed(job, Outcome.FAILED, "Traceback...\nValueError: boom"),
        0,
        JobStatus.DEAD,
        Outcome.FAILED,
        error="Traceback...\nValueError: boom",
        dead_reason_starts="failed 1 attempt; last error: ValueError: boom",
    ),
    FinishCase(
        "timed-out-dead",
        lambda job: failed(job, Outcome.TIMED_OUT, "timed out after 5 s"),
        0,
        JobStatus.DEAD,
        Outcome.TIMED_OUT,
        error="timed out after 5 s",
        dead_reason_starts="timed out",
    ),
    FinishCase(
        "permanent",
        lambda job: failed(job, Outcome.FAILED, "Permanent: bad input", permanent=True),
        3,
        JobStatus.DEAD,
        Outcome.FAILED,
        error="Permanent: bad input",
        dead_reason_starts="permanent failure: Permanent: bad input",
    ),
    FinishCase(
        "cancelled",
        lambda job: cancelled(job, "cancelled by operator"),
        3,
        JobStatus.CANCELLED,
        Outcome.CANCELLED,
        error="cancelled by operator",
    ),
]


@pytest.mark.parametrize("case", FINISH_CASES, ids=lambda c: c.name)
def test_finish(store: Store, t0: float, case: FinishCase) -> None:
    job_id = enqueue_one(store, t0, max_retries=case.max_retries, retry_backoff=10.0)
    job = claim_one(store, "w1", t0)
    finish = case.make(job)
    assert store.finish([finish], now=t0 + 5) == []

    after = store.get_job(job_id)
    assert after["status"] == case.status
    assert after["lease_expires_at"] is None
    assert after["attempts"] == 1
    assert after["result"] == case.result
    assert after["error"] == case.error
    (execution,) = after["executions"]
    assert execution["outcome"] == case.outcome
    assert at(execution["ended_at"], t0 + 5)
    assert execution["error"] == case.error
    assert execution["crash"] is None
    if case.status == JobStatus.QUEUED:
        assert after["worker_id"] is None
        assert after["finished_at"] is None
        assert after["dead_reason"] is None
        # the retry waits its backoff: 10 s * (1 +/- 25 % jitter)
        assert 7.5 <= finish.retry_delay <= 12.5
        assert at(after["run_at"], t0 + 5 + finish.retry_delay)
        assert store.claim("w2", ["default"], 1, LEASE, now=t0 + 5 + 7.4) == []
        assert claim_one(store, "w2", t0 + 5 + 12.5).id == job_id
    else:
        assert at(after["finished_at"], t0 + 5)
        assert store.claim("w2", ["default"], 1, LEASE, now=t0 + 10_000) == []
    if case.dead_reason_starts is None:
        assert after["dead_reason"] is None
    else:
        assert after["dead_reason"].startswith(case.dead_reason_starts), after["dead_reason"]


def test_finish_dead_after_max_retries_failures(store: Store, t0: float) -> None:
    job_id = enqueue_one(store, t0, max_retries=2, retry_backoff=0.0)
    for attempt in (1, 2, 3):
        job = claim_one(store, f"w{attempt}", t0 + attempt)
        assert job.attempt == attempt
        store.finish([failed(job, Outcome.FAILED, f"boom {attempt}")], now=t0 + attempt)
    after = store.get_job(job_id)
    assert after["status"] == JobStatus.DEAD
    assert after["attempts"] == 3
    assert after["error"] == "boom 3"
    assert after["dead_reason"] == "failed 3 attempts; last error: boom 3"
    assert [e["outcome"] for e in after["executions"]] == ["failed"] * 3


def test_finish_many_in_one_call(store: Store, t0: float) -> None:
    ids = [enqueue_one(store, t0) for _ in range(5)]
    jobs = store.claim("w1", ["default"], 5, LEASE, now=t0)
    assert store.finish([succeeded(j, str(i)) for i, j in enumerate(jobs)], now=t0 + 1) == []
    results = {j.id: i for i, j in enumerate(jobs)}
    for job_id in ids:
        after = store.get_job(job_id)
        assert after["status"] == JobStatus.SUCCEEDED
        assert after["result"] == results[job_id]
    assert store.finish([], now=t0 + 2) == []


@pytest.mark.parametrize("live_first", [True, False])
def test_a_finish_of_two_attempts_of_one_job_lands_the_live_one(
    store: Store, t0: float, live_first: bool
) -> None:
    """A worker whose attempt was taken from it (its lease ran out) and which claimed the
    job again ends both in one call: the live attempt lands with its own result, the
    taken one is answered lost, whichever comes first in the batch."""
    job_id = enqueue_one(store, t0)
    first = claim_one(store, "w1", t0, lease=10)
    (reclaimed,) = store.reclaim_expired("lease_expired", now=t0 + 11)
    assert reclaimed.job_id == job_id
    second = claim_one(store, "w1", t0 + 12, lease=100)
    assert second.id == job_id and second.lease != first.lease
    ends = [succeeded(second, "2"), succeeded(first, "1")]
    lost = store.finish(ends if live_first else ends[::-1], now=t0 + 13)
    assert lost == [first.lease]
    after = store.get_job(job_id)
    assert after["status"] == JobStatus.SUCCEEDED and after["result"] == 2
    assert after["execution_id"] == second.lease.execution_id


def test_a_batch_of_mixed_ends_writes_each_its_own(store: Store, t0: float) -> None:
    """A batch whose finishes differ in every field (a success, a failure retried, one
    that dies, one of a later attempt) writes each job its own end: the finish reads each
    lease's fields from the batch by its job id."""
    ids = [enqueue_one(store, t0, max_retries=1) for _ in range(3)]
    retried = claim_one(store, "w1", t0)
    assert store.finish([failed(retried, Outcome.FAILED, "once", delay=0)], now=t0 + 1) == []
    jobs = {job.id: job for job in store.claim("w1", ["default"], 3, LEASE, now=t0 + 2)}
    assert set(jobs) == set(ids) and jobs[retried.id].lease.execution_id == 2
    ok, bad = (job_id for job_id in ids if job_id != retried.id)
    ends = [succeeded(jobs[ok], "7"), failed(jobs[bad], Outcome.FAILED, "boom", delay=60),
            failed(jobs[retried.id], Outcome.FAILED, "again", delay=0)]  # fmt: skip
    assert store.finish(ends, now=t0 + 3) == []
    assert store.get_job(ok)["status"] == JobStatus.SUCCEEDED
    assert store.get_job(ok)["result"] == 7
    assert store.get_job(bad)["status"] == JobStatus.QUEUED
    assert store.get_job(bad)["error"] == "boom"
    assert store.get_job(retried.id)["status"] == JobStatus.DEAD
    assert store.get_job(retried.id)["error"] == "again"


def test_finish_a_cancel_requested_job_as_cancelled(store: Store, t0: float) -> None:
    job_id = enqueue_one(store, t0)
    job = claim_one(store, "w1", t0)
    store.cancel_job(job_id, now=t0 + 1)
    assert store.finish([cancelled(job)], now=t0 + 2) == []
    after = store.get_job(job_id)
    assert after["status"] == JobStatus.CANCELLED
    assert after["executions"][-1]["outcome"] == Outcome.CANCELLED


# -- release (graceful shutdown) ----------------------------------------------------------


def test_release_gives_the_job_back_without_counting_an_attempt(store: Store, t0: float) -> None:
    job_id = enqueue_one(store, t0, max_retries=0)
    job = claim_one(store, "w1", t0)
    assert store.release([job.lease], now=t0 + 3) == []
    after = store.get_job(job_id)
    assert after["status"] == JobStatus.QUEUED
    assert after["attempts"] == 0
    assert after["worker_id"] is None
    assert after["lease_expires_at"] is None
    assert after["dead_reason"] is None
    assert at(after["run_at"], t0 + 3)
    (execution,) = after["executions"]
    assert execution["outcome"] == Outcome.RELEASED
    assert at(execution["ended_at"], t0 + 3)
    # with max_retries=0 a counted attempt would have been the last one: it runs again
    again = claim_one(store, "w2", t0 + 3)
    assert (again.attempt, again.execution_id) == (1, 2)


def test_release_many(store: Store, t0: float) -> None:
    for _ in range(3):
        enqueue_one(store, t0)
    jobs = store.claim("w1", ["default"], 3, LEASE, now=t0)
    assert store.release([j.lease for j in jobs], now=t0 + 1) == []
    assert all(j["status"] == JobStatus.QUEUED for j in store.list_jobs())
    assert store.release([], now=t0 + 2) == []


# -- a cancel request is never lost to a retry or a release -------------------------------


def _cancel_requested(store: Store, t0: float, **options: Any) -> tuple[str, ClaimedJob, Any]:
    register(store, "w1", t0)
    job_id = enqueue_one(store, t0, **options)
    job = claim_one(store, "w1", t0)
    store.cancel_job(job_id, now=t0 + 1)
    before = store.get_job(job_id)
    assert before["cancel_requested"] and before["status"] == JobStatus.RUNNING
    return job_id, job, before


@pytest.mark.parametrize("outcome", [Outcome.FAILED, Outcome.TIMED_OUT, Outcome.CRASHED])
def test_an_attempt_that_would_retry_ends_a_cancel_requested_job(
    store: Store, t0: float, outcome: Outcome
) -> None:
    """The attempt raised (or timed out, or its child died) before it saw the cancel: the
    job must not go back to the queue to run again, it is cancelled."""
    job_id, job, before = _cancel_requested(store, t0, retry_backoff=0.0)
    finish = failed(job, outcome, "ValueError: boom")
    assert finish.status == JobStatus.QUEUED  # what it would have been without the cancel
    assert store.finish([finish], now=t0 + 2) == []

    after = store.get_job(job_id)
    assert after["status"] == JobStatus.CANCELLED
    assert not after["cancel_requested"]
    assert at(after["finished_at"], t0 + 2)
    assert after["worker_id"] == "w1"
    assert after["run_at"] == before["run_at"]
    assert after["lease_expires_at"] is None
    assert after["error"] == "ValueError: boom"
    assert after["attempts"] == 1
    (execution,) = after["executions"]
    assert execution["outcome"] == outcome  # the attempt keeps its own outcome
    assert execution["error"] == "ValueError: boom"
    assert store.claim("w2", ["default"], 10, LEASE, now=t0 + 1000) == []
    assert store.reclaim_expired("lease_expired", now=t0 + 1000) == []


def test_a_released_cancel_requested_job_is_cancelled(store: Store, t0: float) -> None:
    """A worker shutting down gives back a job whose cancel was requested: it ends."""
    job_id, job, before = _cancel_requested(store, t0)
    assert store.release([job.lease], now=t0 + 2) == []

    after = store.get_job(job_id)
    assert after["status"] == JobStatus.CANCELLED
    assert not after["cancel_requested"]
    assert at(after["finished_at"], t0 + 2)
    assert after["worker_id"] == "w1"
    assert after["run_at"] == before["run_at"]
    assert after["lease_expires_at"] is None
    assert after["attempts"] == 0  # a released attempt is not counted
    (execution,) = after["executions"]
    assert execution["outcome"] == Outcome.RELEASED
    assert store.claim("w2", ["default"], 10, LEASE, now=t0 + 1000) == []


def test_a_cancel_request_changes_only_its_own_job_in_a_batch(store: Store, t0: float) -> None:
    register(store, "w1", t0)
    ids = [enqueue_one(store, t0, retry_backoff=0.0) for _ in range(4)]
    jobs = {j.id: j for j in store.claim("w1", ["default"], 4, LEASE, now=t0)}
    store.cancel_job(ids[0], now=t0 + 1)
    store.cancel_job(ids[2], now=t0 + 1)
    fails = [failed(jobs[i], Outcome.FAILED, "boom") for i in ids[:2]]
    assert store.finish(fails, now=t0 + 2) == []
    assert store.release([jobs[i].lease for i in ids[2:]], now=t0 + 2) == []
    statuses = [store.get_job(i)["status"] for i in ids]
    assert statuses == ["cancelled", "queued", "cancelled", "queued"]
    requeued = store.claim("w2", ["default"], 10, LEASE, now=t0 + 3)
    assert sorted(j.id for j in requeued) == sorted([ids[1], ids[3]])


def test_a_cancel_requested_attempt_out_of_retries_is_still_dead(store: Store, t0: float) -> None:
    job_id, job, _ = _cancel_requested(store, t0, max_retries=0)
    store.finish([failed(job, Outcome.FAILED, "boom")], now=t0 + 2)
    after = store.get_job(job_id)
    assert (after["status"], after["cancel_requested"]) == (JobStatus.DEAD, False)
    assert after["dead_reason"]
