"""The error-tracker example (docs/examples/sentry/sentry_reporting.py) with the real
sentry-sdk, its default integrations on (so a failure that also reached Sentry another
way, through heartq's logs, would show as a second event), through a real worker on the
run's first backend (`tests/conftest.py`'s `LAYERS`: the crash hook's report is the same
whichever backend found the crash). Sentry's transport keeps the events in memory:
nothing leaves the machine."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import sentry_sdk
from sentry_sdk.envelope import Envelope
from sentry_sdk.transport import Transport

import heartq
from heartq.model import WorkerInfo
from tests.support import STEADY

EXAMPLE = (
    Path(__file__).resolve().parents[2] / "docs" / "examples" / "sentry" / "sentry_reporting.py"
)


class MemoryTransport(Transport):
    """Sentry's events, kept here instead of sent."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[dict[str, Any]] = []

    def capture_envelope(self, envelope: Envelope) -> None:
        event = envelope.get_event()
        if event is not None:
            self.events.append(dict(event))


@pytest.fixture
def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sentry_reporting_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def sentry() -> Iterator[MemoryTransport]:
    transport = MemoryTransport()
    sentry_sdk.init(
        dsn="https://public@sentry.invalid/1",
        transport=transport,
        auto_enabling_integrations=False,  # would patch FastAPI, SQLAlchemy ... for good
    )
    try:
        yield transport
    finally:
        sentry_sdk.get_client().close()
        sentry_sdk.get_global_scope().set_client(None)


@pytest.fixture
def app(fresh_url: Callable[[], str]) -> Iterator[heartq.App]:
    made = heartq.App(fresh_url())
    yield made
    made.close()


def run_jobs(app: heartq.App) -> None:
    """Run every job to its end (retries included: no backoff) in a real worker here."""

    @app.task(max_retries=2, retry_backoff=0)
    def charge(ctx: heartq.JobContext, order: int) -> str:
        if ctx.attempt == 1:
            raise ConnectionError(f"payment service unreachable for order {order}")
        return "charged"

    @app.task(max_retries=1, retry_backoff=0)
    def ship(order: int) -> None:
        raise ValueError(f"no address for order {order}")

    @app.task
    def refund(order: int) -> None:
        raise heartq.Permanent(f"order {order} was never paid")

    @app.task
    def receipt(order: int) -> object:
        return {"pdf": object()}  # not JSON: the attempt fails without an exception

    charge.enqueue(order=1)
    ship.enqueue(order=2)
    refund.enqueue(order=3)
    receipt.enqueue(order=4)
    heartq.Worker(app, concurrency=2, **STEADY).run(burst=True)


def reported(events: list[dict[str, Any]]) -> list[tuple[str, int, bool]]:
    return sorted(
        (e["contexts"]["heartq"]["task"], e["contexts"]["heartq"]["attempt"],
         e["contexts"]["heartq"]["will_retry"])
        for e in events
    )  # fmt: skip


def test_every_failed_attempt_is_reported_once(
    app: heartq.App, example: ModuleType, sentry: MemoryTransport
) -> None:
    example.report_to_sentry(app)
    run_jobs(app)
    assert reported(sentry.events) == [
        ("charge", 1, True),
        ("receipt", 1, False),  # a result that cannot be stored is not retried
        ("refund", 1, False),
        ("ship", 1, True),
        ("ship", 2, False),
    ]
    [charge] = [e for e in sentry.events if e["tags"]["heartq.task"] == "charge"]
    [exception] = charge["exception"]["values"]
    assert exception["type"] == "ConnectionError"
    assert exception["value"] == "payment service unreachable for order 1"
    assert exception["stacktrace"]["frames"][-1]["function"] == "charge"
    context = charge["contexts"]["heartq"]
    [job] = [j for j in app.store.list_jobs() if j["task"] == "charge"]
    assert context["job_id"] == job["id"]
    assert context["queue"] == charge["tags"]["heartq.queue"] == "default"
    assert context["max_retries"] == 2 and context["execution_id"] >= 1
    assert "ConnectionError: payment service unreachable for order 1" in context["error"]
    [receipt] = [e for e in sentry.events if e["tags"]["heartq.task"] == "receipt"]
    assert receipt["level"] == "error"
    assert receipt["message"].startswith("receipt: PayloadError: ")


def test_retried_attempts_are_not_reported_when_told(
    app: heartq.App, example: ModuleType, sentry: MemoryTransport
) -> None:
    example.report_to_sentry(app, report_retries=False)
    run_jobs(app)
    assert reported(sentry.events) == [
        ("receipt", 1, False),
        ("refund", 1, False),
        ("ship", 2, False),
    ]
    assert {e["exception"]["values"][0]["type"] for e in sentry.events if "exception" in e} == {
        "ValueError",
        "Permanent",
    }


def crash_one(app: heartq.App) -> str:
    """One job whose first attempt ran on a worker that died (a registration and a claim
    made through the store, never renewed), then a worker here, run to the end: it finds
    the dead one silent, ends the attempt crashed, and runs the retry."""

    @app.task(max_retries=2)
    def resize(image: int) -> str:
        return "resized"

    job_id = resize.enqueue(image=7)
    app.store.register_worker(WorkerInfo("gone", "elsewhere", 4242, ("default",), 1))
    (claimed,) = app.store.claim("gone", ["default"], 1, 60.0)
    assert claimed.id == job_id
    heartq.Worker(app, concurrency=2, **{**STEADY, "stale_after": 1.0}).run(burst=True)
    assert app.get_job(job_id)["status"] == "succeeded"
    return job_id


def test_a_crashed_attempt_is_reported_by_the_worker_that_found_it(
    app: heartq.App, example: ModuleType, sentry: MemoryTransport
) -> None:
    example.report_to_sentry(app)
    job_id = crash_one(app)
    [event] = sentry.events  # once, from the crash hook
    assert event["level"] == "error"
    crash = app.get_job(job_id)["executions"][0]["crash"]
    assert event["message"] == f"resize crashed: {crash['reason']}"
    assert event["tags"]["heartq.detected_by"] == crash["detected_by"]
    assert event["tags"]["heartq.will_retry"] is True
    context = event["contexts"]["heartq"]
    assert (context["job_id"], context["attempt"], context["worker_id"]) == (job_id, 1, "gone")
    assert context["crash"]["detected_by"] == crash["detected_by"]


def test_a_crash_a_retry_may_make_good_is_not_reported_when_told(
    app: heartq.App, example: ModuleType, sentry: MemoryTransport
) -> None:
    example.report_to_sentry(app, report_retries=False)
    job_id = crash_one(app)
    assert app.get_job(job_id)["executions"][0]["outcome"] == "crashed"
    assert sentry.events == []
