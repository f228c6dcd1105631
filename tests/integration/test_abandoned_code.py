"""Code whose end the worker decided but which runs on still counts against the worker's
concurrency until it really returns (a thread cannot be killed), and `heartq workers`
shows it as abandoned meanwhile. A killed child of the process pool frees its slot as
soon as it is gone."""

from __future__ import annotations

import json
import signal
import time
from typing import Any

import pytest

from .conftest import STEADY, Harness, WorkerProc, parse_ts

pytestmark = pytest.mark.slow

LINGER = 60.0
"""Seconds the abandoned code runs on at most: it runs until the test, having seen its
end decided and saved and `heartq workers` report it, lets it return (a file it looks
for)."""


def workers_json(harness: Harness, *options: str) -> list[dict[str, Any]]:
    """`heartq workers --json`, as an operator types it."""
    return list(json.loads(harness.heartq("workers", *options, "--json")))


def abandoned(harness: Harness, worker: WorkerProc) -> int:
    [row] = [w for w in workers_json(harness) if w["id"] == worker.id]
    return int(row["abandoned"])


def stamp(harness: Harness, name: str) -> float:
    """When the task wrote `name` (its wall clock, as it recorded it)."""
    return float(harness.path(name).read_text())


SHOWN_WITHIN = 10.0
"""Seconds from an abandoned attempt's end (or its code's return) until `heartq workers`
shows it: the pulse (1 s) writes the count, each look is a `heartq workers` process of its
own (a second or two on a loaded machine: 5.0 s seen beside other sessions, load 12), and
the heartbeat that carried it before came 40 s apart (`PULSE_ONLY`)."""

PULSE_ONLY = {"--heartbeat-interval": "40", "--lease": "120"}
"""No heartbeat within the test: what `heartq workers` shows of abandoned code within
seconds was written by the worker's pulse (1 s), which writes the count when it changes
(the heartbeat carried it once, so both changes lagged up to 40 s)."""


@pytest.mark.parametrize("how", ["timeout", "cancel"])
def test_an_abandoned_thread_holds_its_slot_until_its_code_returns(
    harness: Harness, how: str
) -> None:
    """A timed-out or cancelled thread's code runs on: its slot stays taken, and `heartq
    workers` shows it abandoned within seconds of its outcome, and no more within seconds
    of its code's return. A timeout runs under `PULSE_ONLY`; a cancel under STEADY, since
    the grace a cancel gives the task is min(5 s, the heartbeat interval)."""
    settings = PULSE_ONLY if how == "timeout" else STEADY
    worker = harness.start_worker("--pool", "thread", "--concurrency", "1", settings=settings)
    task = "stubborn_timed" if how == "timeout" else "stubborn"  # timed: 1 s timeout
    first = harness.enqueue(task, {"seconds": LINGER, "until": "return"}, max_retries=0)
    harness.wait_for(lambda: harness.path(f"began-{first}").exists(), 20, "the first to start")
    second = harness.enqueue("stubborn", {"seconds": 0})
    if how == "cancel":  # ignored by the task: forced after its grace (one heartbeat)
        assert harness.store.cancel_job(first) == "cancel_requested"
    decided = harness.wait_status(first, "dead" if how == "timeout" else "cancelled", 10)
    seen = time.monotonic()
    assert decided["executions"][0]["outcome"] == ("timed_out" if how == "timeout" else "cancelled")

    # Decided and saved, but its thread runs on: the only slot stays taken.
    harness.wait_for(lambda: abandoned(harness, worker) == 1, 10, "heartq workers: 1 abandoned")
    shown = time.monotonic() - seen
    assert not harness.path(f"began-{second}").exists()
    assert not harness.path(f"ended-{first}").exists(), "LINGER too short for this machine"
    assert harness.job(second)["status"] == "queued"

    harness.path("return").touch()  # the abandoned code may return now
    harness.wait_for(lambda: harness.path(f"ended-{first}").exists(), 10, "its end")
    returned = time.monotonic()
    harness.wait_for(lambda: abandoned(harness, worker) == 0, 10, "heartq workers: 0 abandoned")
    cleared = time.monotonic() - returned

    done = harness.wait_status(second, "succeeded", 20)
    assert done["result"]["worker_id"] == worker.id
    first_ended, second_began = stamp(harness, f"ended-{first}"), stamp(harness, f"began-{second}")
    assert first_ended <= second_began, "two jobs' code ran at once under --concurrency 1"
    # The outcome was saved at once, not when the code returned: read saved (`decided`)
    # before the test let the code return, and stamped before it did.
    assert parse_ts(decided["finished_at"]) < first_ended
    assert worker.alive()
    if how == "timeout":  # within seconds both ways, and no heartbeat came between
        assert shown < SHOWN_WITHIN and cleared < SHOWN_WITHIN, (shown, cleared)
        assert len(worker.events("heartbeat")) == 0, worker.events("heartbeat")


def test_a_graceful_stop_does_not_wait_for_abandoned_code(harness: Harness) -> None:
    """Its outcome is saved: the shutdown waits for undecided attempts only, never the
    `--shutdown-timeout` for a thread that may never return."""
    settings = {**STEADY, "--shutdown-timeout": "60"}
    worker = harness.start_worker("--pool", "thread", "--concurrency", "1", settings=settings)
    first = harness.enqueue("stubborn_timed", {"seconds": 120}, max_retries=0)
    harness.wait_status(first, "dead", 20)
    harness.wait_for(lambda: abandoned(harness, worker) == 1, 10, "heartq workers: 1 abandoned")

    asked = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit(30) == 0
    assert time.monotonic() - asked < 30  # not the 60 s shutdown timeout
    assert not harness.path(f"ended-{first}").exists()
    [row] = [w for w in workers_json(harness, "--all") if w["id"] == worker.id]
    assert (row["status"], row["abandoned"]) == ("stopped", 0)  # its threads died with it


def test_a_killed_child_frees_its_slot_at_once(harness: Harness) -> None:
    worker = harness.start_worker("--pool", "process", "--concurrency", "1", settings=STEADY)
    first = harness.enqueue("stubborn_timed", {"seconds": 180}, max_retries=0)
    harness.wait_for(lambda: harness.path(f"began-{first}").exists(), 30, "the first to start")
    second = harness.enqueue("stubborn", {"seconds": 0})

    timed_out = harness.wait_status(first, "dead", 30)
    assert timed_out["executions"][0]["outcome"] == "timed_out"
    harness.wait_status(second, "succeeded", 40)
    # The child was killed at its timeout (1 s after its code began, however long the
    # child took to start; its code never returned) and its slot
    # freed with it: the next job did not wait out the 180 s the code would have run.
    assert not harness.path(f"ended-{first}").exists()
    waited = stamp(harness, f"began-{second}") - stamp(harness, f"began-{first}")
    assert waited < 60, waited
    # The registry shows no abandoned code once the worker reported since (read once, it
    # was seen still saying 1 under a full suite).
    harness.wait_for(lambda: abandoned(harness, worker) == 0, 10, "heartq workers: 0 abandoned")
    assert worker.alive()
