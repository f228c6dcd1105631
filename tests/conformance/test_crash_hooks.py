"""Crash hooks at the store (`heartq.hooks.run_crash_hooks` over what a reclaim returns):
each crashed attempt is told once, with its job, arguments, meta, start and crash
context; an attempt its worker stopped trusting (interrupted) and a job claimed ahead and
never started are not crashes. The worker's side (which process runs them, on which path)
is tests/integration/test_crash_hooks.py."""

from __future__ import annotations

import dataclasses
import logging
import threading
from datetime import UTC, datetime
from typing import Any

import pytest

from heartq.errors import StoreUnavailable
from heartq.event_stream import EventStream
from heartq.hooks import CrashInfo, HookList, run_crash_hooks
from heartq.maintenance.reclaimers import LeaseReclaimer, PassCutShort, reclaim_pass
from heartq.maintenance.runner import MaintenanceRunner
from heartq.model import DetectedBy, JobStatus, Reclaimed
from heartq.store import Store
from tests.support import wait_for

from .support import LEASE, claim_one, enqueue_one, register


def _recorder() -> tuple[HookList[CrashInfo], list[CrashInfo]]:
    hooks = EventStream().hooks.crash
    seen: list[CrashInfo] = []
    hooks(seen.append)
    return hooks, seen


def test_a_dead_workers_started_attempts_are_told_and_its_jobs_ahead_are_not(
    store: Store, t0: float
) -> None:
    register(store, "w1", t0)
    started = enqueue_one(
        store, t0, task="resize", args={"image": 7}, queue="media", meta_json='{"tenant": "acme"}'
    )
    ahead = enqueue_one(store, t0, task="resize", args={"image": 8}, queue="media")
    claim = store.claim("w1", ["media"], 1, LEASE, now=t0 + 1, ahead=1)
    assert [j.id for j in claim] == [started] and [j.id for j in claim.ahead] == [ahead]

    reclaimed = store.reclaim_worker(
        "w1", DetectedBy.LIVENESS_LOCK, "worker process gone", now=t0 + 3
    )
    assert {r.job_id for r in reclaimed} == {started, ahead}
    hooks, seen = _recorder()
    run_crash_hooks(hooks, reclaimed)

    (info,) = seen  # the job claimed ahead never ran: no attempt crashed
    assert (info.job_id, info.task, info.queue) == (started, "resize", "media")
    assert (info.attempt, info.execution_id, info.worker_id) == (1, 1, "w1")
    assert dict(info.args) == {"image": 7}
    assert dict(info.meta) == {"tenant": "acme"}
    assert info.started_at == datetime.fromtimestamp(t0 + 1, UTC)
    assert info.detected_by == DetectedBy.LIVENESS_LOCK
    assert info.reason == "worker process gone"
    assert info.crash["worker_id"] == "w1"
    assert info.status is JobStatus.QUEUED and info.will_retry
    assert info.dead_reason is None
    assert store.get_job(started)["executions"][-1]["crash"] == dict(info.crash)


def test_a_crash_that_ends_the_job_says_it_will_not_retry(store: Store, t0: float) -> None:
    job_id = enqueue_one(store, t0, max_retries=0)
    job = claim_one(store, "w1", t0, lease=600)
    crash = {"reason": "child process killed by SIGKILL", "signal": "SIGKILL", "exit_code": -9}
    reclaimed = store.crash_attempt(job.lease, crash, DetectedBy.CHILD_EXIT, now=t0 + 1)
    assert reclaimed is not None
    hooks, seen = _recorder()
    run_crash_hooks(hooks, [reclaimed])

    (info,) = seen
    assert info.job_id == job_id
    assert info.status is JobStatus.DEAD and not info.will_retry
    assert info.dead_reason == store.get_job(job_id)["dead_reason"]
    assert (info.detected_by, info.crash["signal"]) == (DetectedBy.CHILD_EXIT, "SIGKILL")
    assert dict(info.args) == {} and dict(info.meta) == {}


def test_an_expired_lease_is_a_crash_and_an_interruption_is_not(store: Store, t0: float) -> None:
    expired = enqueue_one(store, t0)
    claim_one(store, "w1", t0, lease=5)
    interrupted = enqueue_one(store, t0)
    untrusted = claim_one(store, "w2", t0, lease=600)

    reaped = store.reclaim_expired(DetectedBy.LEASE_EXPIRED, now=t0 + 10)
    fenced = store.crash_attempt(
        untrusted.lease,
        {"reason": "lease could not be renewed"},
        DetectedBy.SELF_FENCE,
        now=t0 + 11,
    )
    assert [r.job_id for r in reaped] == [expired]
    assert fenced is not None and fenced.job_id == interrupted
    hooks, seen = _recorder()
    run_crash_hooks(hooks, [*reaped, fenced])

    assert [(i.job_id, i.detected_by) for i in seen] == [(expired, DetectedBy.LEASE_EXPIRED)]


def test_a_failing_hook_is_logged_and_the_next_one_still_runs(store: Store, t0: float) -> None:
    job_id = enqueue_one(store, t0)
    job = claim_one(store, "w1", t0, lease=600)
    reclaimed = store.crash_attempt(job.lease, {"reason": "x"}, DetectedBy.CHILD_EXIT, now=t0 + 1)
    assert reclaimed is not None
    hooks = EventStream().hooks.crash
    told: list[str] = []

    def broken(info: CrashInfo) -> None:
        raise RuntimeError("tracker down")

    hooks(broken)
    hooks(lambda info: told.append(info.job_id))
    run_crash_hooks(hooks, [reclaimed])  # never raises
    assert told == [job_id]


class _LostAtRound:
    """The real store, except that its reap fails (the database lost) from the `n`th
    call on: a fault injected between two rounds of one pass, each its own commit."""

    def __init__(self, store: Store, n: int) -> None:
        self._store = store
        self._n = n
        self.calls = 0

    def reclaim_expired(self, *args: Any, **kwargs: Any) -> list[Reclaimed]:
        self.calls += 1
        if self.calls >= self._n:
            raise StoreUnavailable("the database went away", reason="down")
        return self._store.reclaim_expired(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def _two_expired(store: Store, t0: float) -> list[str]:
    """Two jobs whose leases expired long ago (by the database's own clock)."""
    job_ids = [enqueue_one(store, t0 - 100) for _ in range(2)]
    for _ in job_ids:
        claim_one(store, "w1", t0 - 100, lease=1)
    return job_ids


def test_a_reaper_pass_cut_short_still_tells_the_crashes_it_ended(store: Store, t0: float) -> None:
    """The reaper's first round reclaims (and commits) one job, its second fails: the pass
    fails as before (`maintenance_failed`), and the crash its first round ended still
    reaches the crash hooks (it went untold when a later round's failure discarded it)."""
    job_ids = _two_expired(store, t0)
    told: list[str] = []
    failures: list[Exception] = []
    once = threading.Event()

    def failed(exc: Exception, service: str) -> int:
        failures.append(exc)
        once.set()
        return logging.WARNING

    stream = EventStream()
    stream.hooks.crash(lambda info: told.append(info.job_id))
    lost = _LostAtRound(store, 2)
    reaper = LeaseReclaimer(lost, stream, batch=1, interval=0.05)  # type: ignore[arg-type]
    runner = MaintenanceRunner([reaper], "w-observer", stream, on_failure=failed)
    runner.start()
    try:
        wait_for(once.is_set, 10, what="the pass to fail")
    finally:
        runner.stop()
    assert isinstance(failures[0], StoreUnavailable)
    (reaped,) = told
    assert reaped in job_ids
    assert store.get_job(reaped)["executions"][-1]["outcome"] == "crashed"


def test_heartq_reaps_pass_cut_short_carries_what_landed(store: Store, t0: float) -> None:
    """`heartq reclaim`'s pass (probe, monitor, reaper: each its own commit) failing at the
    reaper's second round raises `PassCutShort` with the job the first round reclaimed,
    and the database's error as its cause."""
    job_ids = _two_expired(store, t0)
    with pytest.raises(PassCutShort) as cut:
        lost = _LostAtRound(store, 2)
        reclaim_pass(lost, EventStream(), stale_after=3600, batch=1)  # type: ignore[arg-type]
    assert isinstance(cut.value.cause, StoreUnavailable)
    (reaped,) = cut.value.found.reclaimed()
    assert reaped.job_id in job_ids and reaped.outcome == "crashed"


def test_a_crash_that_cannot_be_described_costs_the_others_nothing(
    store: Store, t0: float, caplog: pytest.LogCaptureFixture
) -> None:
    """One reclaimed attempt whose stored arguments do not decode: logged as `hook_failed`
    naming its job, and the next crash is still told."""
    job_ids = _two_expired(store, t0)
    reclaimed = store.reclaim_expired(DetectedBy.LEASE_EXPIRED)
    assert sorted(r.job_id for r in reclaimed) == sorted(job_ids)
    broken = dataclasses.replace(reclaimed[0], args_json="{not json")
    hooks, seen = _recorder()
    with caplog.at_level(logging.ERROR, logger="heartq"):
        run_crash_hooks(hooks, [broken, reclaimed[1]])
    assert [i.job_id for i in seen] == [reclaimed[1].job_id]
    (record,) = [r for r in caplog.records if r.getMessage() == "hook_failed"]
    assert reclaimed[0].job_id in record.heartq_fields["error"]  # type: ignore[attr-defined]
