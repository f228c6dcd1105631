"""A task that hangs times out on its live worker (docs/design/protocol.md step 4), and a cancel
request stops a running task on the thread and the async pool."""

from __future__ import annotations

import time

import pytest

from .conftest import STEADY, Harness

pytestmark = pytest.mark.slow


def test_a_silent_task_times_out_on_its_live_worker(harness: Harness) -> None:
    """A task past its `heartbeat_timeout` (`deadlock`: 0.5 s, it blocks for ever and never
    heartbeats) is ended by its own worker, which is alive and says why: `timed_out`,
    "silent for over 0.5 s", counted as a failure of the task's (its retry would wait
    its backoff), within about its silence, not once a lease ran out and a reaper took
    it as a crash (`crashed 1 workers in 1 attempts; last: lease expired`)."""
    # A 30 s lease: only the worker's own supervisor can end the attempt in time.
    worker = harness.start_worker(settings={**STEADY, "--lease": "30"})
    job_id = harness.enqueue("deadlock", max_retries=0)
    harness.wait_for(lambda: harness.started_file(job_id, 1).exists(), 10, "the task to start")

    dead = harness.wait_status(job_id, "dead", 10)
    (execution,) = dead["executions"]
    silence = "silent for over 0.5 s: the task did not call ctx.heartbeat() within its "
    silence += "heartbeat_timeout"
    assert execution["outcome"] == "timed_out"
    assert execution["worker_id"] == worker.id and execution["crash"] is None
    assert execution["error"] == silence
    assert dead["dead_reason"] == f"timed out on its only attempt; {silence}"
    # The worker logs the end once it is committed: the status can be read first.
    (timed_out,) = harness.wait_for(
        lambda: worker.job_events("job_timed_out", job_id), 5, "the worker to log the end"
    )
    assert timed_out["error"] == silence
    assert not worker.job_events("lease_lost", job_id)

    # The worker itself was never suspected: alive, active, heartbeating, still working.
    assert worker.alive()
    assert not worker.events("worker_deactivated")
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
