"""Process pool: a child that dies (SIGKILL, segfault) is closed as `crashed` at once with
its signal, and the worker survives it (docs/design/protocol.md step 14); a task's
`retry_delay` is asked in the child, where the exception is, and its answer crosses; a
timeout is judged on the child's own clock, not on when its parent reads its report."""

from __future__ import annotations

import signal
import textwrap
import time

import pytest

from tests.conftest import on_every_backend

from .conftest import Harness, parse_ts
from .worker_tasks import TASKS_SOURCE

pytestmark = pytest.mark.slow

LONG_LEASE = {"--heartbeat-interval": "1", "--lease": "30", "--reclaim-interval": "10"}
"""A 30 s lease: a reclaim within a second or two can only come from the child's exit."""


@pytest.mark.parametrize(("how", "signal_name"), [("kill", "SIGKILL"), ("segv", "SIGSEGV")])
def test_dead_child_is_reclaimed_at_once_and_the_worker_lives_on(
    harness: Harness, how: str, signal_name: str
) -> None:
    worker = harness.start_worker("--pool", "process", "--concurrency", "2", settings=LONG_LEASE)
    job_id = harness.enqueue("crash_child_first", {"how": how})
    harness.wait_for(lambda: harness.started_file(job_id, 1).exists(), 20, "attempt 1 to start")
    started_at = harness.started_file(job_id, 1).stat().st_mtime

    done = harness.wait_status(job_id, "succeeded", 15)
    crashed, succeeded = done["executions"]
    assert crashed["outcome"] == "crashed"
    crash = crashed["crash"]
    assert crash["detected_by"] == "child_exit"
    assert crash["signal"] == signal_name
    assert crash["worker_id"] == worker.id
    assert crash["pid"] == int(harness.started_file(job_id, 1).read_text())
    assert parse_ts(crash["detected_at"]) - started_at < 3.0  # not the 30 s lease
    assert signal_name in crashed["error"]

    # Same worker, new child: the retry ran there, and so does the next job.
    assert succeeded["worker_id"] == worker.id
    assert done["result"]["pid"] != crash["pid"]
    crashed_events = worker.job_events("job_crashed", job_id)
    assert crashed_events and crashed_events[0]["signal"] == signal_name
    following = harness.enqueue("quick", {"value": 7})
    after = harness.wait_status(following, "succeeded", 15)
    assert after["result"]["worker_id"] == worker.id
    assert after["result"]["value"] == 7
    assert worker.alive()
    assert harness.worker_row(worker.id)["status"] == "active"


BEATING_TASKS = textwrap.dedent(
    """

    @app.task(heartbeat_timeout=1.0, max_retries=0)
    def beating(ctx, seconds):
        \"\"\"Beats every 0.1 s for `seconds` (over its 1 s heartbeat_timeout), then
        returns; records when its code began and ended (wall clock).\"\"\"
        mark(f"began-{ctx.job_id}", repr(time.time()))
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            ctx.heartbeat()
            time.sleep(0.1)
        mark(f"ended-{ctx.job_id}", repr(time.time()))
        return ident(ctx)
    """
)


@pytest.mark.parametrize(
    ("task", "seconds", "bound"),
    [("stubborn_timed", 0.3, 1.0), ("beating", 1.6, 1.6 + 1.0)],
    ids=["timeout", "heartbeat_timeout"],
)
def test_code_that_kept_its_time_is_not_timed_out_by_a_parent_that_read_it_late(
    harness: Harness, task: str, seconds: float, bound: float
) -> None:
    """A child's code keeps its time while the worker, its parent, is SIGSTOPped until
    well past when the attempt would have ended (a stopped or starved worker, as the
    chaos runner's `sigstop` makes one): `stubborn_timed` runs 0.3 s of its 1 s
    `timeout`; `beating` calls `ctx.heartbeat()` every 0.1 s for 1.6 s, under its 1 s
    `heartbeat_timeout`. Each attempt succeeds: the timeouts count from when the child
    began the code, and are judged at the times the child says it beat and ended, not
    when its parent got round to reading them (judged at the read, and ended by the
    supervisor, which wakes past them too, each ended `timed_out`). The 30 s lease
    outlives the stop."""
    harness.path("tasks.py").write_text(TASKS_SOURCE + BEATING_TASKS)
    worker = harness.start_worker("--pool", "process", settings=LONG_LEASE)
    job_id = harness.enqueue(task, {"seconds": seconds}, max_retries=0)
    began, ended = harness.path(f"began-{job_id}"), harness.path(f"ended-{job_id}")
    harness.wait_for(lambda: began.exists() and began.read_text(), 30, "the code to begin")
    worker.signal(signal.SIGSTOP)
    try:
        harness.wait_for(ended.exists, 20, "the code to end while its worker is stopped")
        over = float(began.read_text()) + bound + 0.5  # when it would have ended, and some
        harness.wait_for(lambda: time.time() > over, 5, "that moment to pass")
    finally:
        worker.signal(signal.SIGCONT)
    job = harness.wait_job(
        job_id, lambda j: j["status"] in ("succeeded", "dead"), 20, "the job to end"
    )
    assert (job["status"], [e["outcome"] for e in job["executions"]]) == (
        "succeeded",
        ["succeeded"],
    ), job["error"]
    assert worker.alive()


def test_arguments_that_cannot_bind_are_dead_at_once_in_a_child_too(harness: Harness) -> None:
    """The child tells its parent why the attempt could not run (not just that it
    failed), so the job is dead after one attempt, as on the other pools."""
    worker = harness.start_worker("--pool", "process", settings=LONG_LEASE)
    job_id = harness.enqueue("quick", {"valeu": 7}, max_retries=3)
    dead = harness.wait_status(job_id, "dead", 20)
    assert dead["attempts"] == 1
    assert [e["outcome"] for e in dead["executions"]] == ["failed"]
    assert dead["dead_reason"] == (
        "its arguments do not fit the task, not retried: BadArguments: task 'quick': "
        "got an unexpected keyword argument 'valeu'"
    )
    assert worker.alive()


RETRY_DELAY_TASKS = textwrap.dedent(
    """

    def partner_wait(attempt, exc):
        mark(f"asked-{attempt}", f"{os.getpid()} {type(exc).__name__}")
        return 60.0 * attempt + 0.25


    @app.task(max_retries=2, retry_delay=partner_wait)
    def refused(ctx):
        started(ctx)
        raise ConnectionError("partner down")
    """
)


@on_every_backend
def test_retry_delay_is_asked_in_the_child_and_its_wait_kept(harness: Harness) -> None:
    harness.path("tasks.py").write_text(TASKS_SOURCE + RETRY_DELAY_TASKS)
    harness.start_worker("--pool", "process", settings=LONG_LEASE)
    job_id = harness.enqueue("refused", {})
    job = harness.wait_job(
        job_id, lambda j: j["status"] == "queued" and j["attempts"] == 1, 20, "a retry"
    )
    wait = parse_ts(job["run_at"]) - parse_ts(job["executions"][-1]["ended_at"])
    assert wait == pytest.approx(60.25, abs=0.002)  # the function's, not the job's backoff
    child_pid = harness.started_file(job_id, 1).read_text()
    assert harness.path("asked-1").read_text() == f"{child_pid} ConnectionError"
