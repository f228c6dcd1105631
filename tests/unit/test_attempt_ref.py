"""An attempt's identity (`heartq.AttemptRef`): made once where the attempt is known and
read, never copied, by its context, its attempt hooks' info and its crash hooks' info;
and the fencing key a process pool's child writes with, its worker's id included."""

from __future__ import annotations

import pickle
from types import MappingProxyType

import pytest

from heartq.context import JobContext
from heartq.hooks import AttemptInfo, CrashInfo
from heartq.model import AttemptRef, JobStatus, Lease, Reclaimed

from .fakes import job as claimed


class _Control:
    lost = cancel_requested = False

    def touch(self, progress: object) -> None: ...

    def save_checkpoint(self, checkpoint: object) -> None: ...


def test_a_claimed_job_s_ref_names_the_attempt_its_worker_runs() -> None:
    job = claimed("j1", 3, task="resize", worker_id="w-claimed")
    ref = job.ref_for("w-running")
    assert ref == AttemptRef("j1", "resize", "default", 3, 3, "w-running")
    # the fencing key a child writes with carries the worker (not part of equality)
    assert ref.lease == Lease("j1", 3) and ref.lease.worker_id == "w-running"
    assert pickle.loads(pickle.dumps(ref)) == ref  # sent whole to a process pool's child


def test_the_views_of_an_attempt_read_their_names_from_one_ref() -> None:
    ref = AttemptRef("j1", "resize", "media", 2, 7, "w1")
    ctx = JobContext(ref, checkpoint=None, control=_Control(), max_retries=3)
    info = AttemptInfo(ref, args=MappingProxyType({}), meta=MappingProxyType({}), max_retries=3)
    for view in (ctx, info):
        assert view.ref is ref
        assert (view.job_id, view.task, view.queue, view.attempt, view.execution_id,
                view.worker_id) == ("j1", "resize", "media", 2, 7, "w1")  # fmt: skip
    lost = AttemptRef("j1", "resize", "media", 2, 7, None)
    with pytest.raises(ValueError, match="names no worker"):
        _ = JobContext(lost, checkpoint=None, control=_Control()).worker_id


def test_a_crash_names_the_attempt_that_ended_and_the_worker_that_held_it() -> None:
    reclaimed = Reclaimed(
        job_id="j1", execution_id=7, worker_id="gone-worker", task="resize",
        status=JobStatus.QUEUED, attempts=2, crash={"detected_by": "lease_expired"},
        queue="media",
    )  # fmt: skip
    assert reclaimed.ref == AttemptRef("j1", "resize", "media", 2, 7, "gone-worker")
    info = CrashInfo(reclaimed.ref, args={}, meta={}, started_at=None,
                     crash=reclaimed.crash, status=reclaimed.status)  # fmt: skip
    assert (info.attempt, info.worker_id, info.detected_by) == (2, "gone-worker", "lease_expired")
