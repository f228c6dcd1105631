"""OpenTelemetry tracing: a span for every enqueue and every attempt, one trace from the
caller's request through each attempt of its job (`pip install 'heartq[otel]'`).

`instrument(app)` registers three of the app's hooks (`heartq.hooks`: subscribers of
the app's event stream, `app.events.hooks`), nothing else:

- an enqueue hook: a PRODUCER span `send <queue>` per job, whose context is written into
  the job's `meta` under `META_KEY` by OpenTelemetry's propagator (W3C `traceparent` and
  `tracestate`, and baggage: whatever `OTEL_PROPAGATORS` says), so the trace travels with
  the job through the database to whichever worker runs it;
- an attempt hook: a CONSUMER span `process <queue>` per attempt, its parent the context
  the job carries (and a link to it, as the messaging conventions ask of a process span),
  made current while the task's code runs, so the user's own spans nest under it. Attempt
  hooks run where the code runs (a thread, an asyncio task, a process pool's child), so
  this holds on every pool;
- a crash hook: an attempt whose worker or child died never ended its span, and the span
  died unexported with its process. The worker that finds the crash makes the attempt's
  `process <queue>` span in its stead, from the attempt's start to the crash's detection,
  with the same parent and an ERROR status saying what was found (`heartq.detected_by`).
  An attempt whose lease expired while its code went on (a frozen worker that woke) may
  so have two spans: the one its code ended, and the crash.

Names follow the OpenTelemetry semantic conventions for messaging (`SCHEMA_URL`): span
name `{messaging.operation.name} {destination}`, `messaging.operation.type` (the old
`messaging.operation` is deprecated), `error.type` on a failure. What the conventions do
not name lives under `heartq.` (a library's own namespace, never one of OpenTelemetry's).

Why hooks and not a wrapper around the worker: the hooks already run in the right thread,
task or process with the job's meta in hand, so tracing is one small module that any user
could have written, and costs nothing for an app that does not call it.
"""

from __future__ import annotations

import multiprocessing
import threading
import weakref
from collections.abc import Generator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

try:
    from opentelemetry import propagate, trace
    from opentelemetry.trace import Link, SpanKind, Status, StatusCode
except ImportError as exc:  # the optional dependency is missing
    raise ImportError(
        f"heartq.otel needs opentelemetry-api: pip install 'heartq[otel]' ({exc})"
    ) from exc

from heartq.model import Outcome
from heartq.version import __version__

if TYPE_CHECKING:
    from heartq.app import App
    from heartq.hooks import AttemptInfo, CrashInfo, EnqueueInfo

__all__ = ["META_KEY", "SCHEMA_URL", "instrument"]

META_KEY: Final = "otel"
"""The key of a job's `meta` that holds the enqueue span's context (a JSON object of
strings: `traceparent`, `tracestate` ...)."""
SCHEMA_URL: Final = "https://opentelemetry.io/schemas/1.44.0"
"""The semantic conventions the spans follow."""
SYSTEM: Final = "heartq"
"""`messaging.system`."""
SEND: Final = "send"
PROCESS: Final = "process"
ERROR_OUTCOMES: Final = frozenset(
    {Outcome.FAILED, Outcome.TIMED_OUT, Outcome.CRASHED, Outcome.INTERRUPTED, Outcome.LOST}
)
"""Outcomes whose span ends with status ERROR (a cancel, a release or a snooze within
its task's bound is not an error)."""
CHILD_FLUSH_MILLIS: Final = 5000
"""How long a child process waits for its spans to be exported after each attempt: a
process pool's child ends with `os._exit`, which runs no exit handler, so a batching span
processor's last spans would be lost without it."""

# Attribute names (the conventions' own, then heartq's).
MESSAGING_SYSTEM: Final = "messaging.system"
MESSAGING_OPERATION_NAME: Final = "messaging.operation.name"
MESSAGING_OPERATION_TYPE: Final = "messaging.operation.type"
MESSAGING_DESTINATION_NAME: Final = "messaging.destination.name"
MESSAGING_MESSAGE_ID: Final = "messaging.message.id"
MESSAGING_CLIENT_ID: Final = "messaging.client.id"
ERROR_TYPE: Final = "error.type"
HEARTQ_TASK: Final = "heartq.task"
HEARTQ_ATTEMPT: Final = "heartq.attempt"
HEARTQ_EXECUTION_ID: Final = "heartq.execution_id"
HEARTQ_OUTCOME: Final = "heartq.outcome"
HEARTQ_WILL_RETRY: Final = "heartq.will_retry"
HEARTQ_DETECTED_BY: Final = "heartq.detected_by"

_instrumented: weakref.WeakSet[App] = weakref.WeakSet()
_lock = threading.Lock()


def instrument(app: App, tracer_provider: trace.TracerProvider | None = None) -> None:
    """Trace `app`'s enqueues and attempts (see the module's docstring). Spans go to
    `tracer_provider`, else to the global one (`opentelemetry.trace.set_tracer_provider`,
    or what `opentelemetry-instrument` configured from `OTEL_*` variables), looked up
    when each span starts, so it may be set after this call.

    Call it where the app is made (its module's import), so a process pool's children,
    which import that module, trace their attempts too; `heartq worker --otel` calls it
    in the worker and in each child. A second call for the same app changes nothing."""
    with _lock:
        if app in _instrumented:
            return
        _instrumented.add(app)
    tracing = _Tracing(tracer_provider)
    app.hooks.enqueue(tracing.enqueue)
    app.hooks.attempt(tracing.attempt)
    app.hooks.crash(tracing.crash)


class _Tracing:
    """The three hooks of one `instrument` call, with its tracer."""

    def __init__(self, tracer_provider: trace.TracerProvider | None) -> None:
        self._provider = tracer_provider
        self._tracer = trace.get_tracer(
            "heartq", __version__, tracer_provider=tracer_provider, schema_url=SCHEMA_URL
        )

    def enqueue(self, job: EnqueueInfo) -> Generator[None, None, None]:
        """A `send <queue>` span around the store's insert of one job, its context put in
        the job's meta. Not made current: the jobs of one `enqueue_many` are siblings."""
        span = self._tracer.start_span(
            f"{SEND} {job.queue}",
            kind=SpanKind.PRODUCER,
            attributes={
                MESSAGING_SYSTEM: SYSTEM,
                MESSAGING_OPERATION_NAME: SEND,
                MESSAGING_OPERATION_TYPE: SEND,
                MESSAGING_DESTINATION_NAME: job.queue,
                HEARTQ_TASK: job.task,
            },
        )
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(span))
        if carrier:
            job.meta[META_KEY] = carrier
        try:
            yield
        finally:  # a hook's after part always runs; `finally` also ends it on close()
            if job.job_id is not None:
                span.set_attribute(MESSAGING_MESSAGE_ID, job.job_id)
            if job.exception is not None:
                _record_error(span, job.exception, type(job.exception).__qualname__)
            span.end()

    def attempt(self, attempt: AttemptInfo) -> Generator[None, None, None]:
        """A `process <queue>` span around one attempt's code, current while it runs, its
        parent the context the job carries."""
        span = self._process_span(attempt)
        try:
            with trace.use_span(span, end_on_exit=False):
                yield
        finally:
            self._ended(span, attempt)

    def crash(self, crashed: CrashInfo) -> None:
        """The `process <queue>` span of an attempt that crashed, made by the worker that
        found the crash: from the attempt's start to the crash's detection (now, for
        either if unknown), ERROR. The detection, not the hook's run: a lease reclaimer's hooks run
        once its pass ended, `heartq reclaim`'s when the operator ran it."""
        started = crashed.started_at
        span = self._process_span(crashed, start_time=_ns(started))
        detected = crashed.crash.get("detected_at")
        span.set_attribute(HEARTQ_OUTCOME, Outcome.CRASHED.value)
        span.set_attribute(HEARTQ_WILL_RETRY, crashed.will_retry)
        span.set_attribute(HEARTQ_DETECTED_BY, crashed.detected_by)
        span.set_attribute(ERROR_TYPE, Outcome.CRASHED.value)
        span.set_status(Status(StatusCode.ERROR, crashed.reason))
        span.end(
            end_time=_ns(datetime.fromisoformat(detected)) if isinstance(detected, str) else None
        )

    def _process_span(
        self, attempt: AttemptInfo | CrashInfo, start_time: int | None = None
    ) -> trace.Span:
        """An attempt's `process <queue>` span, started (at `start_time`, ns, or now), its
        parent the context the job carries and a link to it."""
        parent = propagate.extract(_carrier(attempt.meta))
        created = trace.get_current_span(parent).get_span_context()
        attributes: dict[str, Any] = {
            MESSAGING_SYSTEM: SYSTEM,
            MESSAGING_OPERATION_NAME: PROCESS,
            MESSAGING_OPERATION_TYPE: PROCESS,
            MESSAGING_DESTINATION_NAME: attempt.queue,
            MESSAGING_MESSAGE_ID: attempt.job_id,
            HEARTQ_TASK: attempt.task,
            HEARTQ_ATTEMPT: attempt.attempt,
            HEARTQ_EXECUTION_ID: attempt.execution_id,
        }
        if attempt.worker_id is not None:
            attributes[MESSAGING_CLIENT_ID] = attempt.worker_id
        return self._tracer.start_span(
            f"{PROCESS} {attempt.queue}",
            context=parent,
            kind=SpanKind.CONSUMER,
            links=[Link(created)] if created.is_valid else None,
            attributes=attributes,
            start_time=start_time,
        )

    def _ended(self, span: trace.Span, attempt: AttemptInfo) -> None:
        outcome = attempt.outcome
        if outcome is not None:
            span.set_attribute(HEARTQ_OUTCOME, outcome.value)
        span.set_attribute(HEARTQ_WILL_RETRY, attempt.will_retry)
        if outcome in ERROR_OUTCOMES:
            exc = attempt.exception
            if exc is not None:
                _record_error(span, exc, type(exc).__qualname__)
            else:  # e.g. a result that could not be stored: only the error text
                error = (attempt.error or outcome.value).splitlines()[-1]
                span.set_attribute(ERROR_TYPE, outcome.value)
                span.set_status(Status(StatusCode.ERROR, error))
        span.end()
        if multiprocessing.parent_process() is not None:
            self._flush()

    def _flush(self) -> None:
        """Export what this process's span processors hold (a child process ends without
        running exit handlers: see `CHILD_FLUSH_MILLIS`)."""
        provider: Any = self._provider or trace.get_tracer_provider()
        flush = getattr(provider, "force_flush", None)
        if callable(flush):
            flush(CHILD_FLUSH_MILLIS)


def _record_error(span: trace.Span, exc: BaseException, error_type: str) -> None:
    span.record_exception(exc)
    span.set_attribute(ERROR_TYPE, error_type)
    span.set_status(Status(StatusCode.ERROR, f"{error_type}: {exc}"))


def _carrier(meta: Mapping[str, Any]) -> dict[str, str]:
    """The trace context a job carries (none if its meta holds something else there)."""
    found = meta.get(META_KEY)
    if not isinstance(found, Mapping):
        return {}
    return {str(k): v for k, v in found.items() if isinstance(v, str)}


def _ns(moment: datetime | None) -> int | None:
    """A time as OpenTelemetry takes it: nanoseconds since the epoch (None: now)."""
    return None if moment is None else int(moment.timestamp() * 1e9)
