"""OpenTelemetry tracing (`heartq.otel`) through a real worker on both backends: one trace
from the enqueuing request through each attempt to the spans the task opens itself, on
the thread and async pools here and in a process pool's child; failures, idempotence,
and the names the messaging semantic conventions give.

Spans are read from the SDK's in-memory exporter, except a child's, which cannot share
this process's memory: its spans are exported to a file, and the task returns what it
sees of its own span."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import messaging_attributes as semconv
from opentelemetry.semconv.attributes import error_attributes
from opentelemetry.trace import SpanKind, StatusCode

import heartq
import heartq.otel
from heartq.model import WorkerInfo
from heartq.timeutil import iso
from tests.otel_support import FILE_EXPORTER, read_spans
from tests.support import IMPORT_EVERY_COMMAND, wait_for

from .test_outcomes import wait_status

POOLS = ["thread", "async"]


class Spans:
    """A tracer provider of this test's own, exporting to memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("test")

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.named(name)
        assert len(found) == 1, [s.name for s in self.exporter.get_finished_spans()]
        return found[0]


@pytest.fixture
def spans() -> Iterator[Spans]:
    made = Spans()
    yield made
    made.provider.shutdown()


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def ids(span: ReadableSpan) -> tuple[int, int]:
    context = span.get_span_context()
    assert context is not None
    return context.trace_id, context.span_id


@pytest.mark.parametrize("pool", POOLS)
def test_one_trace_from_the_request_through_the_attempt_to_the_tasks_span(
    app: heartq.App, run_worker, spans: Spans, pool: str
) -> None:
    heartq.otel.instrument(app, tracer_provider=spans.provider)

    @app.task(queue="mail")
    def send_mail(ctx: heartq.JobContext, to: str) -> str:
        with spans.tracer.start_as_current_span("render"):
            return to

    @app.task(queue="mail")
    async def send_async(to: str) -> str:
        with spans.tracer.start_as_current_span("render async"):
            return to

    with spans.tracer.start_as_current_span("POST /signup"):
        job_id = send_mail.enqueue(to="ada@example.org")
        async_id = send_async.enqueue(to="bob@example.org")
    with run_worker(app, pool=pool) as worker:
        wait_status(app, job_id, "succeeded")
        wait_status(app, async_id, "succeeded")

    request = spans.one("POST /signup")
    trace_id, request_id = ids(request)
    sends = spans.named("send mail")
    processes = {s.attributes["messaging.message.id"]: s for s in spans.named("process mail")}
    assert len(sends) == 2 and set(processes) == {job_id, async_id}
    for send, inner in zip(sends, [spans.one("render"), spans.one("render async")], strict=True):
        job = send.attributes["messaging.message.id"]
        process = processes[job]
        assert ids(send)[0] == ids(process)[0] == ids(inner)[0] == trace_id
        assert parent_id(send) == request_id
        assert parent_id(process) == ids(send)[1]
        assert [link.context.span_id for link in process.links] == [ids(send)[1]]
        assert parent_id(inner) == ids(process)[1]
        assert send.kind is SpanKind.PRODUCER and process.kind is SpanKind.CONSUMER
        assert dict(send.attributes) == {
            "messaging.system": "heartq",
            "messaging.operation.name": "send",
            "messaging.operation.type": "send",
            "messaging.destination.name": "mail",
            "messaging.message.id": job,
            "heartq.task": send.attributes["heartq.task"],
        }
        assert dict(process.attributes) == {
            "messaging.system": "heartq",
            "messaging.operation.name": "process",
            "messaging.operation.type": "process",
            "messaging.destination.name": "mail",
            "messaging.message.id": job,
            "messaging.client.id": worker.id,
            "heartq.task": send.attributes["heartq.task"],
            "heartq.attempt": 1,
            "heartq.execution_id": app.get_job(job)["executions"][0]["execution_id"],
            "heartq.outcome": "succeeded",
            "heartq.will_retry": False,
        }
        assert process.status.status_code is StatusCode.UNSET
    assert {s.attributes["heartq.task"] for s in sends} == {"send_mail", "send_async"}
    assert app.get_job(job_id)["meta"]["otel"]["traceparent"].startswith(f"00-{trace_id:032x}-")


@pytest.mark.parametrize("pool", POOLS)
def test_a_failure_is_an_error_span_with_its_exception(
    app: heartq.App, run_worker, spans: Spans, pool: str
) -> None:
    heartq.otel.instrument(app, tracer_provider=spans.provider)

    @app.task(max_retries=1, retry_backoff=0)
    def always_fails() -> None:
        raise ValueError("no stock left")

    @app.task
    def unstorable() -> object:
        return object()  # not JSON: fails for good, without an exception of its code

    failing, bad_result = always_fails.enqueue(), unstorable.enqueue()
    with run_worker(app, pool=pool):
        wait_status(app, failing, "dead")
        wait_status(app, bad_result, "dead")
    attempts = sorted(
        (
            s
            for s in spans.named("process default")
            if s.attributes["heartq.task"] == "always_fails"
        ),
        key=lambda s: s.attributes["heartq.attempt"],
    )
    assert [
        (s.attributes["heartq.attempt"], s.attributes["heartq.outcome"],
         s.attributes["heartq.will_retry"], s.attributes["error.type"], s.status.status_code)
        for s in attempts
    ] == [
        (1, "failed", True, "ValueError", StatusCode.ERROR),
        (2, "failed", False, "ValueError", StatusCode.ERROR),
    ]  # fmt: skip
    for span in attempts:
        assert span.status.description == "ValueError: no stock left"
        [event] = span.events
        assert event.name == "exception"
        assert event.attributes is not None
        assert event.attributes["exception.type"] == "ValueError"
        assert event.attributes["exception.message"] == "no stock left"
    [stored] = [s for s in spans.named("process default") if s not in attempts]
    assert stored.status.status_code is StatusCode.ERROR
    assert stored.attributes["error.type"] == "failed"
    assert (stored.status.description or "").startswith("PayloadError: ")
    assert stored.attributes["heartq.will_retry"] is False


def test_a_crashed_attempt_gets_its_span_from_the_worker_that_found_it(
    app: heartq.App, run_worker, spans: Spans
) -> None:
    """An attempt whose worker died never ended its span; the worker that reclaims it
    makes the attempt's span: same parent, from the attempt's start, ERROR. The dead
    worker here is a registration and a claim made through the store, never renewed."""
    heartq.otel.instrument(app, tracer_provider=spans.provider)

    @app.task
    def resize() -> str:
        return "done"

    with spans.tracer.start_as_current_span("request"):
        job_id = resize.enqueue()
    send = spans.one("send default")
    store = app.store
    store.register_worker(WorkerInfo("gone", "elsewhere", 4242, ("default",), 1))
    (claimed,) = store.claim("gone", ["default"], 1, 60.0)
    started = store.get_job(job_id)["executions"][0]["started_at"]

    with run_worker(app):  # finds "gone" silent or without its liveness lock
        wait_status(app, job_id, "succeeded")
    crash, ran = sorted(
        spans.named("process default"), key=lambda s: s.attributes["heartq.attempt"]
    )
    assert crash.kind is SpanKind.CONSUMER
    assert ids(crash)[0] == ids(send)[0] and parent_id(crash) == ids(send)[1]
    assert crash.attributes[semconv.MESSAGING_MESSAGE_ID] == job_id
    assert crash.attributes[semconv.MESSAGING_CLIENT_ID] == "gone"
    assert (crash.attributes["heartq.attempt"], crash.attributes["heartq.execution_id"]) == (1, 1)
    assert crash.attributes["heartq.outcome"] == "crashed"
    assert crash.attributes["heartq.will_retry"] is True
    assert crash.attributes["heartq.detected_by"] in {"stale_worker", "liveness_lock"}
    assert crash.attributes[error_attributes.ERROR_TYPE] == "crashed"
    assert crash.status.status_code is StatusCode.ERROR
    # from the attempt's start to the crash's detection, both shown to the millisecond
    stored = app.get_job(job_id)["executions"][0]
    started_ns = datetime.fromisoformat(started).timestamp() * 1e9
    detected_ns = datetime.fromisoformat(stored["crash"]["detected_at"]).timestamp() * 1e9
    assert crash.start_time is not None and abs(crash.start_time - started_ns) < 2e6
    assert crash.end_time is not None and abs(crash.end_time - detected_ns) < 2e6
    assert crash.end_time > crash.start_time
    assert ran.attributes["heartq.attempt"] == 2 and ran.attributes["heartq.outcome"] == "succeeded"
    assert claimed.id == job_id


def test_a_crash_told_late_ends_its_span_at_its_detection(app: heartq.App, spans: Spans) -> None:
    """The crash hooks may run well after the crash was found and ended (a reaper's pass
    of many rounds, `heartq reclaim --app` run later): the span ends at the detection the
    crash context records, not when the hook ran."""
    heartq.otel.instrument(app, tracer_provider=spans.provider)
    started = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    detected = datetime(2026, 1, 2, 3, 6, 5, 250000, tzinfo=UTC)
    crash = {"reason": "lease expired", "detected_by": "lease_expired",
             "detected_at": iso(detected)}  # fmt: skip
    told = heartq.CrashInfo(
        heartq.AttemptRef("j", "resize", "media", attempt=1, execution_id=1, worker_id="gone"),
        args={}, meta={}, started_at=started, crash=crash, status=heartq.JobStatus.QUEUED,
    )  # fmt: skip
    app.hooks.crash.run(told)
    (span,) = spans.named("process media")
    assert span.start_time == int(started.timestamp() * 1e9)
    assert span.end_time == int(detected.timestamp() * 1e9)


def test_instrumenting_twice_still_makes_one_span_each(
    app: heartq.App, run_worker, spans: Spans
) -> None:
    heartq.otel.instrument(app, tracer_provider=spans.provider)
    heartq.otel.instrument(app, tracer_provider=spans.provider)
    heartq.otel.instrument(app)

    @app.task
    def work() -> int:
        return 1

    job_id = work.enqueue()
    with run_worker(app):
        wait_status(app, job_id, "succeeded")
    assert sorted(s.name for s in spans.exporter.get_finished_spans()) == [
        "process default",
        "send default",
    ]
    assert len(app.hooks.enqueue) == len(app.hooks.attempt) == 1


def test_enqueue_many_makes_sibling_spans_and_a_failed_enqueue_an_error(
    app: heartq.App, spans: Spans
) -> None:
    heartq.otel.instrument(app, tracer_provider=spans.provider)
    with spans.tracer.start_as_current_span("batch") as batch:
        made = app.enqueue_many("work", [{"n": 1}, {"n": 2}, {"n": 3}], queue="q")
    sends = spans.named("send q")
    assert [s.attributes["messaging.message.id"] for s in sends] == made
    assert {parent_id(s) for s in sends} == {batch.get_span_context().span_id}
    metas = [app.get_job(job_id)["meta"]["otel"]["traceparent"] for job_id in made]
    assert [m.split("-")[2] for m in metas] == [f"{ids(s)[1]:016x}" for s in sends]

    app.migrate()
    with pytest.raises(heartq.ConfigError):
        app.enqueue("t", {"x": 1}, connection=object())  # the store refuses it
    refused = spans.one("send default")
    assert refused.status.status_code is StatusCode.ERROR
    assert refused.attributes["error.type"] == "ConfigError"
    assert "messaging.message.id" not in refused.attributes


def test_a_job_enqueued_without_tracing_starts_its_own_trace(
    app: heartq.App, run_worker, spans: Spans
) -> None:
    @app.task
    def work() -> str:
        return trace.get_current_span().get_span_context().trace_id.to_bytes(16).hex()

    job_id = work.enqueue()  # before instrument(): no context in its meta
    heartq.otel.instrument(app, tracer_provider=spans.provider)
    with run_worker(app):
        wait_status(app, job_id, "succeeded")
    process = spans.one("process default")
    assert process.parent is None and list(process.links) == []
    assert app.get_job(job_id)["result"] == f"{ids(process)[0]:032x}"


def test_the_names_are_the_semantic_conventions() -> None:
    assert heartq.otel.MESSAGING_SYSTEM == semconv.MESSAGING_SYSTEM
    assert heartq.otel.MESSAGING_OPERATION_NAME == semconv.MESSAGING_OPERATION_NAME
    assert heartq.otel.MESSAGING_OPERATION_TYPE == semconv.MESSAGING_OPERATION_TYPE
    assert heartq.otel.MESSAGING_DESTINATION_NAME == semconv.MESSAGING_DESTINATION_NAME
    assert heartq.otel.MESSAGING_MESSAGE_ID == semconv.MESSAGING_MESSAGE_ID
    assert heartq.otel.MESSAGING_CLIENT_ID == semconv.MESSAGING_CLIENT_ID
    assert heartq.otel.ERROR_TYPE == error_attributes.ERROR_TYPE
    operations = semconv.MessagingOperationTypeValues
    assert operations.SEND.value == heartq.otel.SEND
    assert operations.PROCESS.value == heartq.otel.PROCESS


TRACED_MODULE = """
import os
import heartq, heartq.otel
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

SPANS = {spans!r}
{exporter}

# Batched, and never exported on a timer within a test: a child's spans reach the file
# only because heartq.otel flushes at the end of each attempt in a child process.
provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(FileExporter(SPANS), schedule_delay_millis=600_000))
tracer = provider.get_tracer("tasks")
app = heartq.App()
heartq.otel.instrument(app, tracer_provider=provider)


@app.task(max_retries=1, retry_backoff=0)
def traced(ctx):
    with tracer.start_as_current_span("inside") as span:
        if ctx.attempt == 1:
            raise RuntimeError("first attempt")
        return {{
            "trace_id": format(span.get_span_context().trace_id, "032x"),
            "parent_id": format(span.parent.span_id, "016x"),
            "pid": os.getpid(),
        }}
"""


def test_a_process_pool_child_continues_the_trace(
    app: heartq.App, run_worker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child imports the app's module, which instruments the app: the attempt's span
    is the child's, a child of the enqueue's span, and current around the task's own."""
    exported = tmp_path / "spans.jsonl"
    module = f"traced_tasks_{abs(hash(str(tmp_path)))}"
    source = TRACED_MODULE.format(spans=str(exported), exporter=FILE_EXPORTER)
    (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    loaded: Any = __import__(module)
    traced: heartq.App = loaded.app
    traced.use_url(app.url)
    traced.settings = app.settings
    with loaded.tracer.start_as_current_span("request") as request:
        job_id = traced.enqueue("traced")
    with run_worker(traced, pool="process", app_ref=f"{module}:app"):
        wait_for(lambda: traced.get_job(job_id)["status"] == "succeeded", 30, what="succeeded")
    loaded.provider.force_flush()
    result = traced.get_job(job_id)["result"]
    traced.close()

    by_name = read_spans(exported)
    lines = [span for named in by_name.values() for span in named]
    [send] = by_name["send default"]
    processes = sorted(by_name["process default"], key=lambda s: s["attributes"]["heartq.attempt"])
    trace_id = request.get_span_context().trace_id
    assert send["parent_id"] == request.get_span_context().span_id
    assert [p["attributes"]["heartq.outcome"] for p in processes] == ["failed", "succeeded"]
    assert {line["trace_id"] for line in lines} == {trace_id}
    assert {p["parent_id"] for p in processes} == {send["span_id"]}
    assert [i["parent_id"] for i in by_name["inside"]] == [p["span_id"] for p in processes]
    assert (result["trace_id"], result["parent_id"]) == (
        f"{trace_id:032x}",
        f"{processes[1]['span_id']:016x}",
    )
    assert processes[1]["pid"] == result["pid"] != send["pid"]


def test_tracing_is_opt_in_and_named(tmp_path: Path) -> None:
    """Without `instrument()` or `--otel`, nothing of OpenTelemetry is imported: the
    dependency stays optional, and an app that does not trace pays nothing for it."""
    code = (
        "import sys, heartq, heartq.worker\n"
        + IMPORT_EVERY_COMMAND
        + f"app = heartq.App('sqlite:///{tmp_path / 'q.db'}')\n"
        "heartq.Worker(app)\n"
        "assert not [m for m in sys.modules if m.split('.')[0] == 'opentelemetry'], 'imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env={"PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert heartq.otel.__all__ == ["META_KEY", "SCHEMA_URL", "instrument"]
    assert heartq.otel.META_KEY == "otel"
