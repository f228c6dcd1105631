"""`Worker.run(burst=True)` (`heartq worker --burst`) drains its queues: it exits only once
nothing of them is running, runnable, or waiting out a retry's backoff."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import heartq
from heartq.model import JobStatus
from heartq.worker import Worker
from tests.support import wait_for

from .conftest import IN_PROCESS


def test_burst_waits_for_a_retry_in_its_backoff(app: heartq.App) -> None:
    calls: list[int] = []

    @app.task(max_retries=2, retry_backoff=0.4)
    def flaky(ctx: heartq.JobContext) -> int:
        calls.append(ctx.attempt)
        if ctx.attempt < 3:
            raise RuntimeError(f"attempt {ctx.attempt} fails")
        return ctx.attempt

    job_id = flaky.enqueue()
    later = flaky.options(delay=3600).enqueue()  # a first attempt delayed: not waited for
    started = time.monotonic()
    Worker(app, **IN_PROCESS).run(burst=True)

    assert calls == [1, 2, 3]
    assert app.get_job(job_id)["status"] == JobStatus.SUCCEEDED
    assert app.get_job(later)["status"] == JobStatus.QUEUED
    assert time.monotonic() - started < 30


def test_burst_waits_for_a_job_running_on_another_worker(
    app: heartq.App, run_worker: Callable[..., Any]
) -> None:
    """A job another worker runs may fail and come back: the burst run waits for it."""
    release = threading.Event()

    @app.task(max_retries=0)
    def gated() -> str:
        assert release.wait(20)
        return "done"

    job_id = gated.enqueue()
    with run_worker(app):
        wait_for(lambda: app.get_job(job_id)["status"] == JobStatus.RUNNING, 10, "the job to run")
        burst = threading.Thread(target=Worker(app, **IN_PROCESS).run, kwargs={"burst": True})
        burst.start()
        burst.join(0.5)
        assert burst.is_alive(), "the burst run exited while a job of its queue ran"
        release.set()
        burst.join(15)
        assert not burst.is_alive()
    assert app.get_job(job_id)["status"] == JobStatus.SUCCEEDED


def test_burst_exits_once_its_last_outcome_is_saved(app: heartq.App) -> None:
    """The save of a run's last outcome wakes its fetch loop (the freed slot woke it
    before the save): the run exits then, not a whole poll interval later (it sat a poll
    interval, 1 s by default, after its last job)."""

    @app.task
    def quick() -> str:
        return "ok"

    ids = [quick.enqueue() for _ in range(3)]
    started = time.monotonic()
    Worker(app, **{**IN_PROCESS, "poll_interval": 30.0}).run(burst=True)
    took = time.monotonic() - started
    assert [app.get_job(i)["status"] for i in ids] == [JobStatus.SUCCEEDED] * 3
    assert took < 15.0, f"the burst run took {took:.1f} s: it slept through a poll interval"
