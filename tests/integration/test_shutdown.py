"""Graceful shutdown on SIGTERM: stop claiming, wait up to the shutdown timeout, release
the rest with no attempt counted, mark the worker stopped; a second signal skips the wait
(docs/design/protocol.md step 15)."""

from __future__ import annotations

import signal
import time

import pytest

from .conftest import Harness, WorkerProc

pytestmark = pytest.mark.slow


def start_long_job(harness: Harness, worker: WorkerProc) -> str:
    job_id = harness.enqueue("hold", {"seconds": 120})
    harness.wait_for(lambda: harness.started_file(job_id, 1).exists(), 10, "the job to start")
    assert harness.job(job_id)["worker_id"] == worker.id
    return job_id


def assert_released(harness: Harness, job_id: str, worker: WorkerProc) -> None:
    job = harness.job(job_id)
    assert job["status"] == "queued"
    assert job["attempts"] == 0  # a released attempt is not counted
    assert job["worker_id"] is None
    assert job["lease_expires_at"] is None
    (execution,) = job["executions"]
    assert execution["outcome"] == "released"
    assert execution["worker_id"] == worker.id
    assert execution["ended_at"] is not None
    assert worker.job_events("job_released", job_id)
    assert harness.worker_row(worker.id)["status"] == "stopped"


def test_sigterm_releases_a_job_that_outlives_the_shutdown_timeout(harness: Harness) -> None:
    worker = harness.start_worker("--shutdown-timeout", "0.5")
    job_id = start_long_job(harness, worker)

    sent_at = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit(15) == 0
    took = time.monotonic() - sent_at
    assert 0.5 <= took < 5.0, took  # it waited out the timeout, then stopped

    assert_released(harness, job_id, worker)
    (stopped,) = worker.events("worker_stopped")
    assert stopped["released"] == 1


def test_second_sigterm_stops_at_once(harness: Harness) -> None:
    worker = harness.start_worker("--shutdown-timeout", "30")
    job_id = start_long_job(harness, worker)

    sent_at = time.monotonic()
    worker.signal(signal.SIGTERM)
    # Python folds signals that arrive before its handler ran: send the second once the
    # first was handled.
    harness.wait_for(lambda: worker.events("shutdown_requested"), 5, "the first signal")
    assert worker.alive()  # it is waiting for the job (up to 30 s)
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit(10) == 0
    took = time.monotonic() - sent_at
    assert took < 2.5, took

    assert_released(harness, job_id, worker)
