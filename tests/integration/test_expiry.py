"""A job's expiry (`expires=`, Celery's `expires`, RQ's `ttl`) with real worker processes,
on every backend: a job not started by its expiry never runs (its task's marker is never
written), ends `cancelled` with no attempt counted, and says so (`heartq jobs show`, the
event `job_expired`); a job whose expiry is still ahead runs; a job claimed ahead
(`--prefetch`) that expires while it waits in the buffer is dropped at its start, not
run late; a transport-less claim and the buffer go through the same check
(heartq.worker.claimer, `_launch`)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import heartq
from heartq.model import NewJob
from tests.conftest import on_every_backend

from .conftest import STEADY, Harness
from .test_nats_transport import SLOW_POLL
from .test_nats_transport import transport_url as transport_url  # the fixture

pytestmark = [pytest.mark.slow, on_every_backend]

WAIT = 20.0
"""Seconds any one step may take on a loaded 2-core machine (each is sub-second idle)."""


def enqueue(
    harness: Harness,
    task: str,
    priority: int = 0,
    args: dict[str, Any] | None = None,
    expires_in: float | None = None,
) -> str:
    job = NewJob(task, json.dumps(args or {}), priority=priority, expires_in=expires_in)
    return harness.store.enqueue([job])[0]


def test_an_expired_job_never_starts_and_one_still_in_time_runs(harness: Harness) -> None:
    worker = harness.start_worker(settings=STEADY)  # its tasks declared before the enqueue
    app = heartq.App(harness.url)
    try:  # the public option: an aware time already past, and seconds still ahead
        past = datetime.now(UTC) - timedelta(seconds=1)
        expired = app.enqueue("quick", {"value": 1}, expires=past, priority=5)
        in_time = app.enqueue("quick", {"value": 2}, expires=600)
    finally:
        app.close()
    done = harness.wait_status(in_time, "succeeded", WAIT)
    assert done["attempts"] == 1 and harness.started_file(in_time, 1).exists()

    gone = harness.wait_status(expired, "cancelled", WAIT)
    assert not harness.started_file(expired, 1).exists()  # its code never ran
    assert gone["attempts"] == 0
    assert gone["error"].startswith("expired:")
    assert [e["outcome"] for e in gone["executions"]] == ["released"]
    harness.wait_for(lambda: worker.job_events("job_expired", expired), WAIT, "job_expired")
    assert not worker.job_events("job_expired", in_time)
    assert "expired: not started by" in harness.heartq("jobs", "show", expired)


def test_a_job_expiring_while_buffered_is_dropped_at_its_start(harness: Harness) -> None:
    holder = enqueue(harness, "hold", 9, args={"seconds": 60})
    worker = harness.start_worker("--concurrency", "1", "--prefetch", "2", settings=STEADY)
    harness.wait_for(lambda: harness.started_file(holder, 1).exists(), WAIT, "the holder")
    enqueued_at = time.time()
    ahead = enqueue(harness, "quick", 5, expires_in=3.0)  # from the database's clock
    buffered = harness.wait_job(
        ahead, lambda j: j["status"] == "running" and j["claimed_ahead"], WAIT, "buffered"
    )
    assert time.time() < enqueued_at + 3.0, "buffered only after its expiry: a slow machine"
    assert buffered["worker_id"] == worker.id
    expires_at = datetime.fromisoformat(buffered["expires_at"].replace("Z", "+00:00"))
    harness.wait_for(
        lambda: harness.store.clock() > expires_at.timestamp() + 0.2, WAIT, "its expiry to pass"
    )
    harness.store.cancel_job(holder)  # the slot frees: the buffered job would start now

    gone = harness.wait_status(ahead, "cancelled", WAIT)
    assert not harness.started_file(ahead, 1).exists()
    assert gone["attempts"] == 0 and gone["error"].startswith("expired:")
    harness.wait_for(lambda: worker.job_events("job_expired", ahead), WAIT, "job_expired")
    harness.wait_status(holder, "cancelled", WAIT)
    later = enqueue(harness, "quick", 0, expires_in=600.0)  # the worker goes on as before
    assert harness.wait_status(later, "succeeded", WAIT)["attempts"] == 1


def test_a_job_a_transport_names_past_its_expiry_is_not_run(
    harness: Harness, transport_url: str
) -> None:
    """Through NATS the message names the job and the worker claims it by id
    (`claim_ids`): the same check at its start. The worker polls the database only
    every second, so the message most often takes the job first; which way it came,
    it is not run (tests/conformance/test_expiry.py holds `claim_ids` to return the
    expiry)."""
    worker = harness.start_worker("--transport", transport_url, settings=SLOW_POLL)
    app = heartq.App(harness.url, transport=transport_url)
    try:
        past = datetime.now(UTC) - timedelta(seconds=1)
        expired = app.enqueue("quick", {"value": 1}, expires=past)
        in_time = app.enqueue("quick", {"value": 2}, expires=600)
    finally:
        app.close()
    assert harness.wait_status(in_time, "succeeded", WAIT)["attempts"] == 1
    gone = harness.wait_status(expired, "cancelled", WAIT)
    assert not harness.started_file(expired, 1).exists()
    assert gone["attempts"] == 0 and gone["error"].startswith("expired:")
    harness.wait_for(lambda: worker.job_events("job_expired", expired), WAIT, "job_expired")
