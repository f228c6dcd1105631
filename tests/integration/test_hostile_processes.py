"""What task code does to the process that runs it, through real worker processes on
every pool: it raises anything (`KeyboardInterrupt`, `sys.exit`, what cannot be pickled,
every case of tests/runtime/test_hostile_tasks.py), exits the process (`os._exit`),
installs signal handlers, closes or replaces stdout and stderr, leaves a non-daemon
thread running, forks. Each ends as an outcome of its attempt (or, where the process
itself died, a crash found as crashes are); the worker keeps logging and running jobs,
and a SIGTERM still stops it, within its bound. The process pool's children run each
case too, so every case is seen on every pool here (on one backend: what the task does
to its process is the runtime's, whatever the database)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from .conftest import STEADY, Harness

pytestmark = pytest.mark.slow

EXPECTED = {
    "keyboard_interrupt": ("dead", "failed", "KeyboardInterrupt"),
    "system_exit": ("dead", "failed", "SystemExit: 3"),
    "unpicklable": ("dead", "failed", "holds a lock"),
    "generator_exit": ("dead", "failed", "GeneratorExit"),
    "cancelled_error": ("dead", "failed", "CancelledError"),
    "unprintable": ("dead", "failed", "Unprintable"),
    "recursion": ("dead", "failed", "RecursionError"),
    "memory_error": ("dead", "failed", "MemoryError"),
    "unencodable": ("dead", "failed", "PayloadError"),
    "signal_handlers": ("dead", "failed", "signal only works in main thread"),
    "close_stdio": ("succeeded", "succeeded", None),
    "replace_stdio": ("succeeded", "succeeded", None),
    "outliving_thread": ("succeeded", "succeeded", None),
    "fork": ("succeeded", "succeeded", None),
}
"""(job status, the execution's outcome, a text its error holds) on the thread and async
pools. In a process-pool child, the child is the process: it may install signal handlers
(its parent kills it with SIGKILL), and `os._exit` there is a crash."""

IN_A_CHILD = {
    **EXPECTED,
    "signal_handlers": ("succeeded", "succeeded", None),
    "os_exit": ("dead", "crashed", "exited with code 3"),
}

EXIT_WITHIN = 25.0
"""Seconds a SIGTERMed worker may take to exit: its graceful stop, then at most
`EXIT_GRACE` (5 s) for what a task left behind, with room for a loaded machine."""


@pytest.mark.parametrize("pool", ["thread", "async", "process"])
def test_what_a_task_does_to_its_process_ends_as_its_attempts_outcome(
    harness: Harness, pool: str
) -> None:
    expected = IN_A_CHILD if pool == "process" else EXPECTED
    worker = harness.start_worker("--pool", pool, "--concurrency", "2", settings=STEADY)
    ids = {kind: harness.enqueue("hostile", {"kind": kind}, max_retries=0) for kind in expected}
    if pool == "async":  # sync code stuck in asyncio.to_thread, whose executor exit joins
        ids["stuck"] = harness.enqueue("stubborn_timed", {"seconds": 600}, max_retries=0)
    ended = {"succeeded", "dead"}
    harness.wait_for(
        lambda: all(harness.job(i)["status"] in ended for i in ids.values()),
        90,
        "every hostile job to end",
        lambda: {k: harness.job(i)["status"] for k, i in ids.items()},
    )
    wrong = {}
    for kind, (status, outcome, error) in expected.items():
        job = harness.job(ids[kind])
        [execution] = job["executions"]  # one attempt, never a second (a fork's copy)
        seen = (job["status"], execution["outcome"])
        if seen != (status, outcome) or (error and error not in (execution["error"] or "")):
            wrong[kind] = (*seen, (execution["error"] or "")[-200:])
    assert not wrong, wrong
    assert harness.job(ids["fork"])["result"] == "fork"
    if pool == "process":  # the child its thread keeps from exiting is ended after it reported
        child = int(harness.started_file(ids["outliving_thread"], 1).read_text())
        harness.wait_for(lambda: not pid_alive(child), 20, "the outliving child to be ended")

    # The worker runs on, at full concurrency, and still logs (stderr was closed).
    later = [harness.enqueue("quick", {"value": n}) for n in range(4)]
    for job_id in later:
        harness.wait_status(job_id, "succeeded", 30)
    harness.wait_for(
        lambda: all(worker.job_events("job_succeeded", i) for i in later),
        10,
        "job_succeeded logged after a task closed stderr",
    )
    assert worker.alive()

    # A SIGTERM still stops it (no task's handler), and its process exits within the
    # bound, though a task left a thread running; nothing of its process group is left.
    asked = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit(EXIT_WITHIN + 30) == 0
    assert time.monotonic() - asked < EXIT_WITHIN
    harness.wait_for(lambda: not group_alive(worker.pid), 10, "its children to be gone")


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def pid_alive(pid: int) -> bool:
    """Whether `pid` still runs (a zombie, reaped by its parent soon, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
