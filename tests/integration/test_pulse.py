"""The pulse, with real worker processes at default settings (30 s heartbeats, 90 s
leases): progress seen within about a second while a job runs and exact at its finish,
the checkpoints of the last seconds before a SIGKILL handed to the next attempt, and
cancels that land within a second or two (the cooperative cancel on both backends:
PostgreSQL hears cancels, SQLite reads them each pulse).

Bounds are the issue's (2 s for progress and cooperative cancels, 10 s for a process
that never calls heartq), measured from database times where they exist, so the test's
own polling does not count; with a 1 s pulse they leave a loaded machine a second.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import pytest

from tests.conftest import on_every_backend
from tests.integration.conftest import Harness, parse_ts
from tests.support import FAST, worker_flags

DEFAULTS: dict[str, str | None] = dict.fromkeys(worker_flags(FAST))
"""Every FAST option dropped: the worker runs heartq's defaults."""

PROGRESS_LAG = 2.0
"""A report is seen in the database within 2 s (the pulse is 1 s)."""
CHECKPOINT_LOSS = 3.0
"""A SIGKILL may lose the checkpoints of the last pulse interval (1 s) and the time the
kill took to land; none reported more than 3 s before it."""
COOPERATIVE_CANCEL = 2.0
SILENT_CANCEL = 10.0


def reports(harness: Harness, job_id: str) -> list[tuple[str, int, int, float]]:
    """`(kind, execution, step, wall time)` of every line the `reporting` task wrote."""
    path: Path = harness.path(f"reports-{job_id}")
    if not path.exists():
        return []
    found = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 4:
            found.append((parts[0], int(parts[1]), int(parts[2]), float(parts[3])))
    return found


def test_progress_is_seen_within_a_second_or_two_and_exact_at_the_finish(
    harness: Harness,
) -> None:
    harness.start_worker(settings=DEFAULTS)
    steps = 8
    job_id = harness.enqueue("reporting", {"steps": steps, "step_s": 0.75})
    seen_at: dict[int, float] = {}  # step -> when the test first saw it stored
    deadline = time.time() + 60
    while True:
        job = harness.job(job_id)
        progress = job["progress"]["value"]
        if progress is not None and job["status"] == "running":
            seen_at.setdefault(round(progress * steps), time.time())
        if job["status"] not in ("queued", "running"):
            break
        assert time.time() < deadline, f"the job did not end: {job}"
        time.sleep(0.05)
    assert job["status"] == "succeeded", job
    reported = {step: t for kind, _, step, t in reports(harness, job_id) if kind == "report"}
    assert sorted(reported) == list(range(1, steps + 1))
    # Seen while it ran, most steps (reports within one pulse are coalesced: the newer
    # wins) ...
    lags = [seen_at[step] - reported[step] for step in sorted(seen_at)]
    assert len(lags) >= steps // 2, f"progress seen while running: {sorted(seen_at)}"
    # ... within about a pulse of being reported.
    assert statistics.median(lags) <= PROGRESS_LAG, lags
    # Exact at its finish: the last step's stage and message, value 1.0, last checkpoint.
    assert job["progress"] == {"value": 1.0, "stage": f"step {steps}", "message": "8 of 8"}
    assert job["checkpoint"] == {"step": steps}


def test_checkpoints_of_the_last_seconds_before_a_sigkill_reach_the_next_attempt(
    harness: Harness,
) -> None:
    first = harness.start_worker(settings=DEFAULTS)
    # 12 s of steps: the kill lands in their middle however late the second worker
    # starts; the resumed attempt's steps are quick (only where it began is checked)
    job_id = harness.enqueue("reporting", {"steps": 60, "step_s": 0.2, "resumed_step_s": 0.01})
    harness.wait_for(lambda: len(reports(harness, job_id)) >= 25, 30, "24 steps reported")
    second = harness.start_worker(settings=DEFAULTS)  # after the claim: it takes the rescue
    killed_at = first.kill()
    done = harness.wait_status(job_id, "succeeded", 60)
    lines = reports(harness, job_id)
    before_kill = [(step, t) for kind, eid, step, t in lines if kind == "report" and eid == 1]
    [resumed] = [step for kind, eid, step, _ in lines if kind == "start" and eid == 2]
    assert done["result"]["resumed_from"] == resumed
    assert done["result"]["worker_id"] == second.id
    # the next attempt started from a checkpoint the first one reported ...
    assert resumed in {step for step, _ in before_kill}
    # ... and lost none reported more than a pulse (and the kill's own time) before it
    must_have = max(step for step, t in before_kill if t <= killed_at - CHECKPOINT_LOSS)
    assert resumed >= must_have, (resumed, must_have, killed_at, before_kill[-5:])


@on_every_backend  # PostgreSQL hears cancels (LISTEN); SQLite reads them each pulse
@pytest.mark.parametrize(("pool", "task"), [("thread", "heartbeat_loop"), ("async", "async_loop")])
def test_a_cancel_ends_a_cooperative_job_within_two_seconds(
    harness: Harness, pool: str, task: str
) -> None:
    harness.start_worker("--pool", pool, settings=DEFAULTS)
    job_id = harness.enqueue(task, {"seconds": 120})
    harness.wait_status(job_id, "running", 30)
    asked = time.time()
    harness.store.cancel_job(job_id, by="test")
    done = harness.wait_status(job_id, "cancelled", 30)
    took = parse_ts(done["finished_at"]) - asked
    assert took <= COOPERATIVE_CANCEL, f"cancelled {took:.2f} s after the request"
    assert done["cancelled_by"] == "test"
    assert [e["outcome"] for e in done["executions"]] == ["cancelled"]


def test_a_cancel_stops_a_silent_process_pool_job_within_ten_seconds(harness: Harness) -> None:
    harness.start_worker("--pool", "process", settings=DEFAULTS)
    job_id = harness.enqueue("silent", {"seconds": 120})
    harness.wait_status(job_id, "running", 30)
    asked = time.time()
    harness.store.cancel_job(job_id, by="test")
    done = harness.wait_status(job_id, "cancelled", 30)
    took = parse_ts(done["finished_at"]) - asked
    assert took <= SILENT_CANCEL, f"cancelled {took:.2f} s after the request"
    [execution] = done["executions"]
    assert execution["outcome"] == "cancelled"
