"""Claim ahead (`heartq worker --prefetch N`) with real worker processes: the jobs a
killed worker held in its buffer go back with no attempt counted, one whose code started
counts its attempt (a job that kills its worker cannot loop for ever), a graceful stop
releases the buffer, a cancel of a buffered job ends it cancelled without running it,
and `heartq jobs show` tells a buffered job from a started one (docs/DESIGN.md,
"Claim ahead")."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from typing import Any

import pytest

from heartq.model import NewJob

from .conftest import STEADY, Harness

pytestmark = pytest.mark.slow

WAIT = 20.0
"""Seconds any one step may take on a loaded 2-core machine (each is sub-second idle)."""


def enqueue(harness: Harness, task: str, priority: int, args: dict[str, Any] | None = None,
            max_retries: int = 3) -> str:  # fmt: skip
    """Queue a job; its priority fixes the order the worker claims the test's jobs in."""
    job = NewJob(
        task=task,
        args_json=json.dumps(args or {}),
        priority=priority,
        max_retries=max_retries,
        retry_backoff=0.0,
    )
    return harness.store.enqueue([job])[0]


def buffered(harness: Harness, job_ids: list[str], worker_id: str) -> bool:
    """Every one of `job_ids` is claimed ahead by `worker_id` (running, not started)."""
    jobs = [harness.job(job_id) for job_id in job_ids]
    return all(
        j["status"] == "running" and j["claimed_ahead"] and j["worker_id"] == worker_id
        for j in jobs
    )


def prefetching(harness: Harness, n: int, *extra: str) -> Any:
    """A worker of one slot that claims up to `n` jobs ahead (`extra`: more options)."""
    return harness.start_worker(
        "--concurrency", "1", "--prefetch", str(n), *extra, settings=STEADY
    )


def test_a_killed_workers_buffer_goes_back_uncounted_and_its_started_job_counts(
    harness: Harness,
) -> None:
    holding = enqueue(harness, "hold_first", 9)
    ahead = [enqueue(harness, "hold_first", 5 - n) for n in range(3)]
    worker = prefetching(harness, 3)
    harness.wait_for(lambda: harness.started_file(holding, 1).exists(), WAIT, "the first start")
    harness.wait_for(lambda: buffered(harness, ahead, worker.id), WAIT, "the buffer to fill")
    assert not any(harness.started_file(job_id, 1).exists() for job_id in ahead)

    worker.kill()
    harness.start_worker(settings=STEADY)  # no prefetch: runs them one claim at a time

    for job_id in ahead:  # never started: back with no attempt counted, no crash
        done = harness.wait_status(job_id, "succeeded", WAIT)
        released, ran = done["executions"]
        assert released["outcome"] == "released" and released["worker_id"] == worker.id
        assert released["crash"] is None
        assert ran["outcome"] == "succeeded"
        assert done["attempts"] == 1
    done = harness.wait_status(holding, "succeeded", WAIT)  # started: counted, a crash
    crashed, ran = done["executions"]
    assert crashed["outcome"] == "crashed" and crashed["worker_id"] == worker.id
    assert done["attempts"] == 2


def test_a_buffered_job_that_kills_its_worker_has_its_attempt_counted(harness: Harness) -> None:
    """The start of a buffered job is recorded before its code runs: the job that kills
    its worker goes dead after its retries, never back to a buffer uncounted."""
    first = enqueue(harness, "quick", 9)
    killer = enqueue(harness, "kill_worker", 5, max_retries=0)
    behind = enqueue(harness, "quick", 1)
    worker = prefetching(harness, 2)
    harness.wait_for(lambda: not worker.alive(), WAIT, "the task to kill its worker")
    assert not harness.started_file(behind, 1).exists()
    other = harness.start_worker(settings=STEADY)  # finds the dead worker's jobs

    killed = harness.wait_status(killer, "dead", WAIT)  # its one attempt was counted
    assert killed["attempts"] == 1
    assert [e["outcome"] for e in killed["executions"]] == ["crashed"]
    # (its finish may not have been saved before the kill: then it runs again)
    harness.wait_status(first, "succeeded", WAIT)
    done = harness.wait_status(behind, "succeeded", WAIT)  # was behind it, never started
    assert done["attempts"] == 1
    assert [e["outcome"] for e in done["executions"]] == ["released", "succeeded"]
    assert other.alive()  # the killer never ran again


def test_a_graceful_stop_releases_the_buffer_uncounted(harness: Harness) -> None:
    holding = enqueue(harness, "hold", 9, {"seconds": 60})
    ahead = [enqueue(harness, "quick", 5 - n) for n in range(3)]
    # the holder is told to stop when the shutdown timeout runs out: 2 s, not the 30 s
    # default, as the buffer is released after the running jobs end
    worker = prefetching(harness, 3, "--shutdown-timeout", "2")
    harness.wait_for(lambda: harness.started_file(holding, 1).exists(), WAIT, "the first start")
    harness.wait_for(lambda: buffered(harness, ahead, worker.id), WAIT, "the buffer to fill")

    worker.signal(signal.SIGTERM)
    assert worker.wait_exit(WAIT + 30) == 0  # hold stops when told (ctx.cancelled)

    for job_id in ahead:
        job = harness.job(job_id)
        assert job["status"] == "queued" and job["attempts"] == 0, job
        assert [e["outcome"] for e in job["executions"]] == ["released"]
        assert worker.job_events("job_released", job_id)
    assert worker.events("worker_stopped")[-1]["released"] >= 3


def test_a_cancelled_buffered_job_ends_cancelled_and_never_runs(harness: Harness) -> None:
    holding = enqueue(harness, "hold", 9, {"seconds": 60})
    ahead = [enqueue(harness, "quick", 5 - n) for n in range(2)]
    worker = prefetching(harness, 2)
    harness.wait_for(lambda: harness.started_file(holding, 1).exists(), WAIT, "the first start")
    harness.wait_for(lambda: buffered(harness, ahead, worker.id), WAIT, "the buffer to fill")

    harness.store.cancel_job(ahead[0], by="test")
    cancelled = harness.wait_status(ahead[0], "cancelled", WAIT)
    assert cancelled["attempts"] == 0
    assert harness.job(holding)["status"] == "running"  # still the one running job
    # the other buffered job still waits; then the holder ends and both slots' work runs
    assert buffered(harness, ahead[1:], worker.id)
    harness.store.cancel_job(holding, by="test")
    harness.wait_status(ahead[1], "succeeded", WAIT)
    assert not harness.started_file(ahead[0], 1).exists()
    assert worker.alive()


def test_jobs_show_tells_a_buffered_job_from_a_started_one(harness: Harness) -> None:
    holding = enqueue(harness, "hold", 9, {"seconds": 60})
    (ahead,) = [enqueue(harness, "quick", 5)]
    worker = prefetching(harness, 1)
    harness.wait_for(lambda: harness.started_file(holding, 1).exists(), WAIT, "the first start")
    harness.wait_for(lambda: buffered(harness, [ahead], worker.id), WAIT, "the buffer to fill")

    def show(job_id: str) -> str:
        argv = [sys.executable, "-m", "heartq", "jobs", "show", job_id, "--url", harness.url]
        done = subprocess.run(
            argv, cwd=harness.dir, env={**harness.env, "COLUMNS": "200"},
            capture_output=True, text=True, timeout=WAIT, check=True,
        )  # fmt: skip
        return done.stdout

    shown = show(ahead)
    assert f"claimed ahead by {worker.id}" in shown, shown
    assert "not yet" in shown, shown
    started = show(holding)
    assert "claimed ahead" not in started, started
    assert worker.id in started
