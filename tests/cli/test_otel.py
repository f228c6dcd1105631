"""`heartq worker --otel` (`HEARTQ_OTEL=1`): a worker started from the command line traces
the attempts of an app whose module does not call `heartq.otel.instrument`, in the worker
and in a process pool's child, continuing the trace the enqueuing process put in the job;
and says in one line when OpenTelemetry is not installed."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import heartq
import heartq.otel
from tests.cli.helpers import FAST_WORKER, HeartqCli
from tests.otel_support import FILE_EXPORTER, read_spans

TRACED_APP = (
    """
import os
import heartq
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
"""
    + FILE_EXPORTER
    + """

# The application's own tracing setup, as it would be in production (no heartq in it).
provider = TracerProvider()
provider.add_span_processor(
    BatchSpanProcessor(FileExporter(os.environ["SPANS_FILE"]), schedule_delay_millis=600_000)
)
trace.set_tracer_provider(provider)
tracer = trace.get_tracer("tasks")
app = heartq.App()


@app.task
def traced():
    with tracer.start_as_current_span("inside"):
        return os.getpid()
"""
)


def enqueue_in_a_request(url: str) -> tuple[str, int, int]:
    """Enqueue `traced` by name from a traced "request" in this process: the job's id,
    the trace's id and the enqueue span's id."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = heartq.App(url)
    heartq.otel.instrument(app, tracer_provider=provider)
    try:
        with provider.get_tracer("web").start_as_current_span("POST /report"):
            job_id = app.enqueue("traced", {})
    finally:
        app.close()
    [send] = [s for s in exporter.get_finished_spans() if s.name == "send default"]
    assert send.context is not None
    return job_id, send.context.trace_id, send.context.span_id


@pytest.mark.parametrize(
    ("how", "pool"),
    [(["--otel"], "process"), ([], "thread"), (["--otel"], "async")],
)
def test_the_worker_continues_the_callers_trace(
    heartq: HeartqCli, tmp_path: Path, how: list[str], pool: str
) -> None:
    """`--otel`, or `HEARTQ_OTEL=1` when no option is typed (the thread pool's case)."""
    (heartq.cwd / "traced.py").write_text(TRACED_APP)
    spans_file = tmp_path / "spans.jsonl"
    job_id, trace_id, send_id = enqueue_in_a_request(heartq.url)
    env = {"SPANS_FILE": str(spans_file), **({} if how else {"HEARTQ_OTEL": "1"})}
    heartq("worker", "traced:app", "--burst", "--pool", pool, *how, *FAST_WORKER, **env).ok()
    assert heartq.job(job_id)["status"] == "succeeded"
    spans = read_spans(spans_file)
    [process] = spans["process default"]
    [inside] = spans["inside"]
    assert (process["trace_id"], process["parent_id"]) == (trace_id, send_id)
    assert (inside["trace_id"], inside["parent_id"]) == (trace_id, process["span_id"])
    assert process["attributes"]["messaging.message.id"] == job_id
    assert process["attributes"]["heartq.outcome"] == "succeeded"
    assert process["pid"] == inside["pid"] == heartq.job(job_id)["result"]  # where it ran


def test_without_otel_the_worker_makes_no_span(heartq: HeartqCli, tmp_path: Path) -> None:
    (heartq.cwd / "traced.py").write_text(TRACED_APP)
    spans_file = tmp_path / "spans.jsonl"
    job_id, trace_id, _ = enqueue_in_a_request(heartq.url)
    heartq("worker", "traced:app", "--burst", *FAST_WORKER, SPANS_FILE=str(spans_file),
           HEARTQ_OTEL="0").ok()  # fmt: skip
    assert heartq.job(job_id)["status"] == "succeeded"
    spans = read_spans(spans_file)
    assert "process default" not in spans
    [inside] = spans["inside"]
    assert inside["parent_id"] is None and inside["trace_id"] != trace_id


def test_otel_without_opentelemetry_is_one_line(heartq: HeartqCli, tmp_path: Path) -> None:
    """A package named `opentelemetry` that cannot be imported, ahead on the path, stands
    for an environment without it."""
    shadow = tmp_path / "shadow" / "opentelemetry"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named opentelemetry')\n")
    env = {"PYTHONPATH": str(shadow.parent)}
    run = heartq("worker", "tasks:app", "--burst", "--otel", **env).fails(1)
    assert run.err.strip() == (
        "heartq: error: --otel (HEARTQ_OTEL) needs OpenTelemetry: pip install 'heartq[otel]' "
        "(No module named opentelemetry)"
    ), run.explain()
    run = heartq("worker", "tasks:app", "--burst", HEARTQ_OTEL="maybe", **env).fails(2)
    assert "Invalid value for '--otel'" in run.err, run.explain()
    heartq("worker", "tasks:app", "--burst", **env).ok()  # without tracing, nothing needs it
