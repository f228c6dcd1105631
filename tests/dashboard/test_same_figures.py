"""The dashboard and the command line show the same figures for the same job: both
read them from the operator's read model (`heartq.inspect`). An attempt's duration and
detection delay agree between `heartq jobs show`, its `--json`, `heartq jobs watch
--json` and the job's page, for an attempt ended by hand and for one whose real worker
process was SIGKILLed after reporting."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from heartq import display
from heartq.cli.job_view import timeline
from heartq.cli.main import cli
from heartq.inspect.attempts import timed
from heartq.lifecycle.fate import succeeded
from heartq.model import DetectedBy, JobStatus, Renewal
from heartq.store import Store
from tests.conformance.support import claim_one, enqueue_one, register
from tests.dashboard.support import Dashboard, claim, page, succeeded_job
from tests.integration.conftest import Harness, parse_ts
from tests.support import FAST, worker_flags

TIMES = re.compile(
    r'<tr data-execution="(\d+)"[^>]*>\s*<td class="num">\d+</td><td class="id">[^<]*</td>'
    r"\s*<td>[^<]*</td><td>[^<]*</td><td>([^<]*)</td><td>([^<]*)</td>"
)
"""An attempt's row of a job's page: its execution id, its `Took` and its `Detection
delay` cells."""

SILENT = re.compile(r"#(\d+)\s+crashed\s+.*\((\S+), then silent; detected (\S+) later\)")
"""A crashed attempt's line of `heartq jobs show`: execution id, duration, delay."""


def shown_json(store_url: str, job_id: str) -> dict[str, Any]:
    """`heartq jobs show ID --json`, run in this process."""
    run = CliRunner().invoke(cli, ["jobs", "show", job_id, "--url", store_url, "--json"])
    assert run.exit_code == 0, run.output
    job: dict[str, Any] = json.loads(run.output)
    return job


def cli_run(*args: str, code: int = 0) -> str:
    """`heartq ARGS`, run in this process; its output."""
    run = CliRunner().invoke(cli, list(args))
    assert run.exit_code == code, run.output
    return run.output


def shown_on_the_page(dashboard: Dashboard, job_id: str) -> dict[str, tuple[str, str]]:
    """Execution id -> (`Took`, `Detection delay`) on the job's page."""
    text = page(dashboard().get(f"/jobs/{job_id}"))
    return {eid: (took, delay) for eid, took, delay in TIMES.findall(text)}


def as_formatted(executions: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """What `jobs show --json` says of each attempt, as the screens print it."""
    return {
        str(ex["execution_id"]): (
            display.fmt_seconds(ex["duration"]),
            display.fmt_seconds(ex["detection_delay"]),
        )
        for ex in executions
    }


def test_a_crashed_attempt_lasts_as_long_on_the_dashboard_as_in_jobs_show(
    store: Store, store_url: str, dashboard: Dashboard
) -> None:
    now = store.clock()
    register(store, "w-lost", now - 100)
    job_id = enqueue_one(store, now - 100, task="resize", retry_backoff=0.0)
    first = claim(store, job_id, now - 100, "w-lost")
    store.heartbeat("w-lost", [Renewal(first.lease)], 30.0, now=now - 90)  # its last word
    (reclaimed,) = store.reclaim_expired(DetectedBy.LEASE_EXPIRED, now=now - 50)
    assert reclaimed.status == JobStatus.QUEUED
    register(store, "w-next", now - 40)
    second = claim_one(store, "w-next", now - 40, lease=3600.0)
    store.finish([succeeded(second, json.dumps("done"))], now=now - 30)
    done = succeeded_job(store, now, {"ok": True})

    for shown in (job_id, done):
        executions = shown_json(store_url, shown)["executions"]
        assert shown_on_the_page(dashboard, shown) == as_formatted(executions)
    crashed, ran = shown_json(store_url, job_id)["executions"]
    # to its last heartbeat, not to when the reaper found it (50 s after the start)
    assert (crashed["duration"], crashed["detection_delay"]) == (10.0, 40.0)
    assert (ran["duration"], ran["detection_delay"]) == (10.0, None)


def test_every_screen_prints_the_figure_the_json_keeps() -> None:
    """Rounded once, to the millisecond: 2.15 s read from its ISO times is 2.1500000953...
    in floating point, which a text view would print as 2.2s while the JSON's 2.15 reads
    2.1s."""
    ex = {
        "execution_id": 1, "worker_id": "w", "outcome": "succeeded", "error": None,
        "crash": None, "started_at": "2026-11-23T13:15:00.123Z",
        "ended_at": "2026-11-23T13:15:02.273Z",
    }  # fmt: skip
    (figures,) = timed([ex])
    assert (figures["duration"], figures["detection_delay"]) == (2.15, None)
    line = timeline([ex], now=parse_ts(ex["ended_at"]))[1].plain
    assert line.endswith(f"({display.fmt_seconds(2.15)})"), line


DEFAULT_SETTINGS: dict[str, str | None] = dict.fromkeys(worker_flags(FAST))
"""A worker at heartq's defaults: a 30 s heartbeat, so while a job runs for a few
seconds its pulse (progress and checkpoints, every second) is its only sign of life."""


@pytest.fixture
def harness(backend: str, store_url: str, tmp_path: Path) -> Iterator[Harness]:
    """Real `heartq worker` processes on the test's queue (tests/integration/conftest.py)."""
    made = Harness(tmp_path, backend, store_url)
    yield made
    made.close()


def stored_step(harness: Harness, job_id: str, at_least: int) -> int:
    """The step of the job's stored checkpoint once it is `at_least`; else 0."""
    step = int((harness.job(job_id)["checkpoint"] or {}).get("step", 0))
    return step if step >= at_least else 0


def reported_at(harness: Harness, job_id: str, step: int) -> float:
    """When the `reporting` task logged its report of `step` (wall clock, its process)."""
    for line in harness.path(f"reports-{job_id}").read_text().splitlines():
        kind, _, logged, at = line.split()
        if kind == "report" and int(logged) == step:
            return float(at)
    raise AssertionError(f"step {step} was never reported")


@pytest.mark.slow
def test_a_worker_killed_after_its_reports_ran_until_its_last_report_on_every_screen(
    harness: Harness, store_url: str, dashboard: Dashboard
) -> None:
    """Issue 23, item 3: a job that checkpointed for seconds, then lost its worker to a
    SIGKILL, was shown as `(0ms, then silent; detected 8.0s later)`: its reports were
    not counted as signs of life. It ran until its last report, and was silent from there
    until its crash was found; every screen says so with the same figures."""
    victim = harness.start_worker(settings=DEFAULT_SETTINGS)
    job_id = harness.enqueue("reporting", {"steps": 600, "step_s": 0.1}, max_retries=0)
    seen = harness.wait_for(lambda: stored_step(harness, job_id, 20), 30, "2 s of reports")
    killed_at = victim.kill()
    harness.start_worker(settings=DEFAULT_SETTINGS)  # finds the crash (its liveness lock)
    harness.wait_status(job_id, "dead", 30)
    # Report `seen` was made after the task logged report `seen - 1`, and stored later
    # still: the attempt was alive then, whatever the machine's load.
    alive_at = reported_at(harness, job_id, seen - 1)

    shown = json.loads(cli_run("jobs", "show", job_id, "--url", store_url, "--json"))
    (ex,) = shown["executions"]
    assert ex["outcome"] == "crashed", ex
    started, ended = parse_ts(ex["started_at"]), parse_ts(ex["ended_at"])
    last_alive = started + ex["duration"]
    # it ran at least until that report (not 0 s: its claim) and no longer than its life
    assert alive_at - 0.002 <= last_alive <= killed_at + 0.5, (alive_at, killed_at, ex)
    # the delay runs from there to the detection, not from the claim
    assert ex["detection_delay"] == pytest.approx(ended - last_alive, abs=0.002)
    assert ended - killed_at - 0.5 <= ex["detection_delay"] <= ended - alive_at + 0.002, ex

    watched = json.loads(cli_run("jobs", "watch", job_id, "--url", store_url, "--json", code=1))
    assert watched["executions"] == shown["executions"]
    figures = as_formatted(shown["executions"])
    text = cli_run("jobs", "show", job_id, "--url", store_url)
    assert {eid: (took, delay) for eid, took, delay in SILENT.findall(text)} == figures, text
    assert shown_on_the_page(dashboard, job_id) == figures
