"""Claim ahead (`heartq worker --prefetch N`) with real worker processes: the jobs a
killed worker held in its buffer go back with no attempt counted, one whose code started
counts its attempt (a job that kills its worker cannot loop for ever), a graceful stop
releases the buffer, a cancel of a buffered job ends it cancelled without running it,
and every screen (the command line, `--json` included, the dashboard, the metrics) shows
a buffered job as claimed ahead, not running (docs/design/claim.md, "Claim ahead")."""

from __future__ import annotations

import json
import re
import signal
import urllib.request
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from heartq.dashboard import create_app
from heartq.model import NewJob
from tests.support import free_port

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
    other = harness.start_worker(settings=STEADY)  # finds the gone worker's jobs

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
    # held past any run of the screens below (a loaded 2-core machine took 63 s for them
    # once, and the buffer started); the teardown kills the worker, not waiting for it
    holding = enqueue(harness, "hold", 9, {"seconds": 600})
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


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float] | None:
    """The worker's metrics, by (name, labels); None while its server is not up."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
            text = answer.read().decode()
    except OSError:
        return None
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_every_screen_shows_buffered_jobs_as_claimed_ahead_not_running(
    harness: Harness,
) -> None:
    """One slot running a job and two jobs in the buffer: each screen says 1 running and
    2 claimed ahead (it once said "running 3 of 1 slots", listed all three as running,
    and showed a buffered job "running for 5.2s" beside "started: not yet")."""
    holding = enqueue(harness, "hold", 9, {"seconds": 60})
    ahead = [enqueue(harness, "quick", 5 - n) for n in range(2)]
    port = free_port()
    worker = prefetching(harness, 2, "--metrics-port", str(port))
    harness.wait_for(lambda: harness.started_file(holding, 1).exists(), WAIT, "the first start")
    harness.wait_for(lambda: buffered(harness, ahead, worker.id), WAIT, "the buffer to fill")

    # heartq workers: running and claimed ahead counted apart
    [row] = [w for w in json.loads(harness.heartq("workers", "--json")) if w["id"] == worker.id]
    assert (row["running"], row["claimed_ahead"], row["concurrency"]) == (1, 2, 1), row
    text = harness.heartq("workers")
    assert "running 1 of 1 slot, 2 claimed ahead" in text, text
    assert re.search(rf"{worker.id}.*\s1/1\s+2\s+0\s", text), text

    # heartq jobs list: the shown state, and filters by it
    listed = json.loads(harness.heartq("jobs", "list", "--status", "running", "--json"))
    assert [(j["id"], j["status"]) for j in listed] == [(holding, "running")]
    listed = json.loads(harness.heartq("jobs", "list", "--status", "claimed", "--json"))
    assert sorted((j["id"], j["status"], j["claimed_ahead"]) for j in listed) == sorted(
        (job_id, "claimed", True) for job_id in ahead
    )
    text = harness.heartq("jobs", "list")
    for job_id in ahead:
        assert re.search(rf"{job_id}\s+quick\s+claimed\s", text), text
    assert re.search(rf"{holding}\s+hold\s+running\s", text), text

    # heartq jobs show: claimed, not started, its attempt not running
    shown = json.loads(harness.heartq("jobs", "show", ahead[0], "--json"))
    assert shown["status"] == "claimed" and shown["claimed_ahead"] is True
    assert shown["worker_gone"] is False
    [attempt] = shown["executions"]
    assert attempt["claimed_ahead"] is True and attempt["duration"] is None
    text = harness.heartq("jobs", "show", ahead[0])
    assert re.search(r"status\s+claimed", text) and "running" not in text, text
    assert f"claimed ahead by {worker.id}" in text and "not yet" in text, text
    assert "claimed ahead, not started" in text, text
    text = harness.heartq("jobs", "show", holding)
    assert re.search(r"status\s+running", text) and "running for" in text, text
    assert "claimed ahead" not in text and worker.id in text, text

    # heartq stats
    stats = json.loads(harness.heartq("stats", "--json"))
    assert (stats["totals"]["running"], stats["totals"]["claimed"]) == (1, 2), stats
    assert (stats["workers"]["running_jobs"], stats["workers"]["claimed_ahead_jobs"]) == (1, 2)
    assert "running 1 of 1 slot, 2 claimed ahead" in harness.heartq("stats")

    # the worker's metrics
    samples = harness.wait_for(lambda: scrape(port), WAIT, "the metrics server")
    default = {"queue": "default"}

    def sample(name: str, **labels: str) -> float | None:
        return samples.get((name, frozenset(labels.items())))

    assert sample("heartq_jobs", status="claimed", **default) == 2
    assert sample("heartq_jobs", status="running", **default) == 1
    assert sample("heartq_worker_running_jobs") == 1
    assert sample("heartq_worker_claimed_ahead_jobs") == 2

    # the dashboard
    with TestClient(create_app(harness.url), follow_redirects=False) as client:
        try:
            page = client.get("/workers").text
            assert f'data-worker="{worker.id}"' in page
            assert 'data-running="1"' in page and 'data-claimed-ahead="2"' in page, page
            page = client.get("/jobs?status=claimed").text
            assert sorted(re.findall(r'<tr data-job="([^"]+)"', page)) == sorted(ahead)
            assert page.count('<span class="status status-claimed">claimed</span>') == 2
            page = client.get("/jobs?status=running").text
            assert re.findall(r'<tr data-job="([^"]+)"', page) == [holding]
            page = client.get(f"/jobs/{ahead[0]}").text
            assert '<span class="status status-claimed">claimed</span>' in page
            assert 'data-testid="claimed-ahead"' in page
            page = client.get("/").text
            assert re.search(r'data-testid="total-claimed".*?<span class="n">2</span>', page)
            assert re.search(r'data-testid="total-running".*?<span class="n">1</span>', page)
        finally:
            client.app.state.store.link.close()  # type: ignore[attr-defined]
