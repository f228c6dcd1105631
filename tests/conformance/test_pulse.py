"""The pulse's writes, on every backend: what running tasks report (progress, checkpoints)
stored for many attempts in one fenced statement, the cancels of a worker's attempts read
in one, and the last report saved with the finish."""

from __future__ import annotations

import json
import threading
from dataclasses import replace

import pytest

from heartq.errors import PayloadError
from heartq.inspect.attempts import timed
from heartq.lifecycle.fate import failed, succeeded
from heartq.model import (
    DetectedBy,
    JobStatus,
    Lease,
    Outcome,
    Progress,
    PulseReport,
    Renewal,
    RenewStatus,
    Report,
)
from heartq.store import Store

from .support import LEASE, at, claim_one, enqueue_one, new_ids, register


def checkpoint(value: object) -> Report:
    return Report(checkpoint_json=json.dumps(value), has_checkpoint=True)


def test_a_pulse_stores_progress_and_checkpoints_of_many_jobs(store: Store, t0: float) -> None:
    a_id, b_id, c_id = (enqueue_one(store, t0) for _ in range(3))
    a, b, c = (claim_one(store, "w1", t0) for _ in range(3))
    reports = [
        PulseReport(a.lease, Report(Progress(0.25, "scan", "1 of 4"))),
        PulseReport(b.lease, checkpoint({"done": 3})),
        PulseReport(c.lease, Report(Progress(0.5), json.dumps([1, 2]), True)),
    ]
    answers = store.pulse(reports, now=t0 + 1)
    assert answers == {x.lease: RenewStatus.RENEWED for x in (a, b, c)}
    first, second, third = (store.get_job(i) for i in (a_id, b_id, c_id))
    assert first["progress"] == {"value": 0.25, "stage": "scan", "message": "1 of 4"}
    assert first["checkpoint"] is None
    assert second["checkpoint"] == {"done": 3} and second["progress"]["value"] is None
    assert third["checkpoint"] == [1, 2] and third["progress"]["value"] == 0.5
    # the pulse is not a heartbeat: no lease is renewed
    assert at(first["lease_expires_at"], t0 + LEASE)


def test_a_report_without_progress_keeps_the_last_progress(store: Store, t0: float) -> None:
    job_id = enqueue_one(store, t0)
    job = claim_one(store, "w1", t0)
    store.pulse([PulseReport(job.lease, Report(Progress(0.4, "copy")))], now=t0 + 1)
    store.pulse([PulseReport(job.lease, checkpoint("c1"))], now=t0 + 2)
    stored = store.get_job(job_id)
    assert stored["progress"] == {"value": 0.4, "stage": "copy", "message": None}
    assert stored["checkpoint"] == "c1"


def test_a_pulse_is_fenced(store: Store, t0: float) -> None:
    job_id = enqueue_one(store, t0)
    old = claim_one(store, "w1", t0, lease=10)
    store.pulse([PulseReport(old.lease, checkpoint({"done": 1}))], now=t0 + 1)
    store.reclaim_expired("lease_expired", now=t0 + 11)
    new = claim_one(store, "w2", t0 + 12)
    stale = PulseReport(old.lease, Report(Progress(0.9), json.dumps({"done": 99}), True))
    ghost = PulseReport(Lease(new_ids(1)[0], 1), Report(Progress(0.1)))  # no job stored
    answers = store.pulse([stale, ghost], now=t0 + 13)
    assert answers == {old.lease: RenewStatus.LOST, ghost.lease: RenewStatus.LOST}
    stored = store.get_job(job_id)
    assert stored["checkpoint"] == {"done": 1} and stored["progress"]["value"] is None
    assert new.checkpoint == {"done": 1}  # the next attempt started from the pulse's write


def test_a_report_is_a_sign_of_life_that_a_crash_runs_to(store: Store, t0: float) -> None:
    """A pulse (and a saved checkpoint) moves the job's `heartbeat_at` without renewing
    its lease: a worker that reported and then died ran until its last report, and was
    silent from there, not from its claim (issue 23, item 3)."""
    register(store, "w1", t0)
    job_id = enqueue_one(store, t0, retry_backoff=0.0)
    job = claim_one(store, "w1", t0, lease=10)
    store.pulse([PulseReport(job.lease, Report(Progress(0.5, "half")))], now=t0 + 3)
    stored = store.get_job(job_id)
    assert at(stored["heartbeat_at"], t0 + 3) and at(stored["lease_expires_at"], t0 + 10)
    assert store.save_checkpoint(job.lease, json.dumps({"step": 4}), now=t0 + 4) == (
        RenewStatus.RENEWED
    )
    assert at(store.get_job(job_id)["heartbeat_at"], t0 + 4)
    (reclaimed,) = store.reclaim_expired(DetectedBy.LEASE_EXPIRED, now=t0 + 12)
    assert at(reclaimed.crash["job_heartbeat_at"], t0 + 4)
    (crashed,) = timed(store.get_job(job_id)["executions"])
    assert (crashed["duration"], crashed["detection_delay"]) == (4.0, 8.0)


def test_a_pulse_answers_a_requested_cancel(store: Store, t0: float) -> None:
    job_id = enqueue_one(store, t0)
    job = claim_one(store, "w1", t0)
    store.cancel_job(job_id, now=t0 + 1, by="test")
    answers = store.pulse([PulseReport(job.lease, Report(Progress(0.3)))], now=t0 + 2)
    assert answers == {job.lease: RenewStatus.CANCEL_REQUESTED}
    assert store.get_job(job_id)["progress"]["value"] == 0.3


def test_an_empty_pulse_writes_nothing(store: Store, t0: float) -> None:
    assert store.pulse([], now=t0) == {}


def test_cancel_requests_are_those_of_the_attempts_asked_about(store: Store, t0: float) -> None:
    """The read answers only for the leases it is given, each fenced on its execution and
    on the worker that asks: a job of another worker, an attempt ended, an execution id
    that is not the job's and a lease not asked about never come back."""
    ids = [enqueue_one(store, t0) for _ in range(5)]
    mine = [claim_one(store, "w1", t0) for _ in range(3)]
    theirs = claim_one(store, "w2", t0)
    held = [j.lease for j in mine]
    assert store.cancel_requests("w1", held) == []
    for job_id in ids:
        store.cancel_job(job_id, now=t0 + 1)  # the queued fifth is cancelled at once
    assert store.get_job(ids[4])["status"] == JobStatus.CANCELLED
    assert store.cancel_requests("w1", held) == sorted(held, key=lambda x: x.job_id)
    assert store.cancel_requests("w1", held[:2]) == sorted(held[:2], key=lambda x: x.job_id)
    assert store.cancel_requests("w2", [theirs.lease]) == [theirs.lease]
    assert store.cancel_requests("w1", [theirs.lease]) == []  # not w1's attempt
    assert store.cancel_requests("nobody", held) == []
    assert store.cancel_requests("w1", []) == []
    other = Lease(mine[1].id, mine[1].execution_id + 1, "w1")  # not this execution
    assert store.cancel_requests("w1", [other]) == []
    store.finish([succeeded(mine[0], None)], now=t0 + 2)  # ended: no longer asked of w1
    assert store.cancel_requests("w1", held) == sorted(held[1:], key=lambda x: x.job_id)


def test_the_finish_saves_the_last_report(store: Store, t0: float) -> None:
    job_id = enqueue_one(store, t0, max_retries=2)
    first = claim_one(store, "w1", t0)
    store.pulse([PulseReport(first.lease, Report(Progress(0.2, "step 2")))], now=t0 + 1)
    last = Report(Progress(0.6, "step 6", "six"), json.dumps({"done": 6}), True)
    store.finish([replace(failed(first, Outcome.FAILED, "boom"), report=last)], now=t0 + 2)
    stored = store.get_job(job_id)
    assert stored["status"] == JobStatus.QUEUED
    assert stored["progress"] == {"value": 0.6, "stage": "step 6", "message": "six"}
    assert stored["checkpoint"] == {"done": 6}
    second = claim_one(store, "w1", t0 + 100)
    assert second.checkpoint == {"done": 6}  # the retry starts where the last one stopped
    done = Report(Progress(0.9, "step 9", "nine"))
    store.finish([replace(succeeded(second, None), report=done)], now=t0 + 101)
    stored = store.get_job(job_id)
    assert stored["status"] == JobStatus.SUCCEEDED
    # a success is complete: its value reads 1.0, its last stage and message are kept
    assert stored["progress"] == {"value": 1.0, "stage": "step 9", "message": "nine"}
    assert stored["checkpoint"] == {"done": 6}  # not reported by this attempt: kept


def test_a_finish_without_a_report_keeps_what_the_pulse_stored(store: Store, t0: float) -> None:
    job_id = enqueue_one(store, t0)
    job = claim_one(store, "w1", t0)
    store.pulse([PulseReport(job.lease, Report(Progress(0.5, "half")))], now=t0 + 1)
    store.finish([succeeded(job, None)], now=t0 + 2)
    assert store.get_job(job_id)["progress"] == {"value": 1.0, "stage": "half", "message": None}


def test_a_heartbeat_no_longer_needs_to_carry_progress(store: Store, t0: float) -> None:
    """The worker renews leases without progress (the pulse carries it): a renewal
    without progress leaves what the pulse stored."""
    job_id = enqueue_one(store, t0)
    job = claim_one(store, "w1", t0)
    store.pulse([PulseReport(job.lease, Report(Progress(0.7, "late")))], now=t0 + 1)
    store.heartbeat("w1", [Renewal(job.lease)], LEASE, now=t0 + 2)
    assert store.get_job(job_id)["progress"]["stage"] == "late"


def test_listen_cancels_hears_the_owning_workers_cancel(store: Store, t0: float) -> None:
    """Where the database can notify, a cancel request reaches the worker running the
    job at once (and only it); elsewhere `listen_cancels` says it cannot tell."""
    heard = threading.Event()
    handle = store.link.listen_cancels("w1", heard.set)
    if not store.link.supports_notify:
        assert handle is None
        return
    assert handle is not None
    other = threading.Event()
    other_handle = store.link.listen_cancels("w2", other.set)
    try:
        job_id = enqueue_one(store, t0)
        claim_one(store, "w1", t0)
        store.cancel_job(job_id, by="test")
        assert heard.wait(10), "no cancel notification within 10 s"
        assert not other.is_set()
    finally:
        handle.close()
        if other_handle is not None:
            other_handle.close()


def test_listen_ends_hears_an_awaited_jobs_end(store: Store, t0: float) -> None:
    """Where the database can notify, the end of a job someone awaits (`await_end`, as
    `App.result` does) is announced at once, and only such an end; elsewhere
    `listen_ends` says it cannot tell. (A waiter that missed it would still re-read once
    a second: only this test tells a lost announcement.)"""
    heard: list[str] = []
    announced = threading.Event()

    def on_end(job_id: str | None) -> None:
        if job_id is not None:  # None: the session was reopened, ends may have been missed
            heard.append(job_id)
            announced.set()

    handle = store.link.listen_ends(on_end)
    if not store.link.supports_notify:
        assert handle is None
        return
    assert handle is not None
    try:
        unawaited, awaited = enqueue_one(store, t0), enqueue_one(store, t0)
        store.await_end(awaited)
        claimed = {job.id: job for job in store.claim("w1", ["default"], 2, LEASE, now=t0)}
        store.finish([succeeded(claimed[unawaited], None)], now=t0 + 1)
        store.finish([succeeded(claimed[awaited], None)], now=t0 + 2)
        assert announced.wait(10), "no end notification within 10 s"
        assert heard == [awaited]  # announced in commit order: the unawaited end was not
    finally:
        handle.close()


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_report_that_is_not_finite_is_refused(store: Store, t0: float, value: float) -> None:
    enqueue_one(store, t0)
    job = claim_one(store, "w1", t0)
    with pytest.raises(PayloadError):
        store.pulse([PulseReport(job.lease, Report(Progress(value)))], now=t0 + 1)


def test_a_completion_saves_what_the_task_reported_inside_its_block(
    store: Store, t0: float
) -> None:
    """`ctx.transaction()`: the report is read when the block ends, so what the task
    reported inside it is the one saved with the completion."""
    job_id = enqueue_one(store, t0)
    job = claim_one(store, "w1", t0)
    latest = [Report(Progress(0.5, "before"), json.dumps({"step": 1}), True)]
    with store.completing(job.lease, lambda: latest[-1]):
        latest.append(Report(Progress(0.9, "inside"), json.dumps({"step": 2}), True))
    stored = store.get_job(job_id)
    assert stored["status"] == JobStatus.SUCCEEDED
    assert stored["progress"] == {"value": 1.0, "stage": "inside", "message": None}
    assert stored["checkpoint"] == {"step": 2}
