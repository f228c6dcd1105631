"""A task that hangs is reclaimed though its worker lives (docs/DESIGN.md step 4), and a cancel
request stops a running task on the thread and the async pool."""

from __future__ import annotations

import time

import pytest

from .conftest import STEADY, Harness

pytestmark = pytest.mark.slow


def test_deadlocked_task_is_reclaimed_while_its_worker_lives(harness: Harness) -> None:
    # STEADY: a 4 s lease, so only the task's silence (not a loaded machine's late
    # renewal) can end this attempt; the worker stops renewing it after 0.5 s of silence.
    worker = harness.start_worker(settings=STEADY)
    # `deadlock` declares heartbeat_timeout=0.5, blocks forever and never heartbeats.
    job_id = harness.enqueue("deadlock", max_retries=0)
    harness.wait_for(lambda: harness.started_file(job_id, 1).exists(), 10, "the task to start")

    dead = harness.wait_status(job_id, "dead", 10)
    (execution,) = dead["executions"]
    assert execution["outcome"] == "crashed"
    assert execution["worker_id"] == worker.id
    assert execution["crash"]["detected_by"] == "lease_expired"
    assert execution["crash"]["worker_id"] == worker.id

    # The worker itself was never suspected: alive, active, heartbeating, still working.
    assert worker.alive()
    assert not worker.events("worker_deactivated")
    lost = worker.job_events("lease_lost", job_id)
    assert lost and "heartbeat_timeout" in lost[0]["reason"]
    row = harness.worker_row(worker.id)
    assert row["status"] == "active"
    beat = row["last_heartbeat_at"]
    harness.wait_for(
        lambda: harness.worker_row(worker.id)["last_heartbeat_at"] != beat, 5, "a heartbeat"
    )
    following = harness.enqueue("quick")
    assert harness.wait_status(following, "succeeded", 10)["result"]["worker_id"] == worker.id
    assert harness.worker_row(worker.id)["status"] == "active"
    assert worker.alive()


@pytest.mark.parametrize(("pool", "task"), [("thread", "heartbeat_loop"), ("async", "async_loop")])
def test_cancel_request_stops_a_running_task(harness: Harness, pool: str, task: str) -> None:
    worker = harness.start_worker("--pool", pool, settings=STEADY)  # one execution, counted
    job_id = harness.enqueue(task, {"seconds": 60})
    harness.wait_for(lambda: harness.started_file(job_id, 1).exists(), 10, "the task to start")
    assert harness.job(job_id)["status"] == "running"

    asked_at = time.monotonic()
    assert harness.store.cancel_job(job_id) == "cancel_requested"
    cancelled = harness.wait_status(job_id, "cancelled", 5)
    took = time.monotonic() - asked_at
    assert took < 2.0, took  # one heartbeat (0.2 s) brings the request; the task stops

    (execution,) = cancelled["executions"]
    assert execution["outcome"] == "cancelled"
    assert execution["worker_id"] == worker.id
    assert cancelled["result"] is None
    assert cancelled["finished_at"] is not None
    # logged once the worker's finish returns, which may be a moment after its commit
    harness.wait_for(lambda: worker.job_events("job_cancelled", job_id), 5, "job_cancelled")
    assert worker.alive()
