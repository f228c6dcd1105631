"""Structured events with stable names, so operators can grep and alert on them.

Each app has one stream of them (`app.events`, `heartq.event_stream.EventStream`): every
event is emitted once, to the stream of the app whose worker, enqueue or hook it tells
of, and its subscribers hear it there: the log (`log_event`, subscribed to every stream),
a worker's Prometheus metrics, a test's drain, a user's own listeners. Two apps in one
process each have theirs and hear only their own events.

The log: every event is logged on the `heartq` logger with the event name as the
message and its fields in `record.heartq_fields`. `configure_logging("json")` prints one
JSON object per line (`{"ts", "level", "event", ...fields}`); `"text"` prints `event
key=value ...`.

Names are part of the public interface: add new ones; a name that had to change (one
word for each thing, docs/design/words-and-map.md, "Words") keeps its old one as a deprecated alias
for one version (`RENAMED_EVENTS`): a listener that subscribes by the old name
(`app.events.subscribe(listener, names=[...])`) still hears the event under it, with a
`DeprecationWarning` when it subscribes, and the old constant of this module still reads,
with a warning, as the new name (what the events carry).

Levels: what operators alert on (crashes, lost leases, dead jobs, stale workers, errors)
is logged at WARNING or ERROR; the lifecycle of workers at INFO; the events of every job
that simply ran (`job_claimed`, `job_succeeded`) and every heartbeat at DEBUG, since
formatting and writing them was a third of a busy worker's CPU (py-spy, no-op jobs).
`heartq worker --log-level debug` shows them; other subscribers (metrics) hear every
event whatever the level.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, NamedTuple, TextIO

from heartq.errors import RenamedWarning

logger = logging.getLogger("heartq")
logger.addHandler(logging.NullHandler())  # a library's events show where the app sends them

WORKER_STARTED: Final = "worker_started"
WORKER_STOPPED: Final = "worker_stopped"
WORKER_DEACTIVATED: Final = "worker_deactivated"
JOB_CLAIMED: Final = "job_claimed"
JOB_SUCCEEDED: Final = "job_succeeded"
JOB_FAILED: Final = "job_failed"
JOB_RETRY_SCHEDULED: Final = "job_retry_scheduled"
RETRY_DELAY_FAILED: Final = "retry_delay_failed"
"""A task's `retry_delay` raised or answered no number of seconds, so the wait before the
retry followed its other rules (`retry_intervals`, the schedule): job_id, task, attempt,
worker_id, error, retry_in."""
JOB_DEAD: Final = "job_dead"
JOB_CANCELLED: Final = "job_cancelled"
JOB_EXPIRED: Final = "job_expired"
"""A job not started by its expiry (`expires=`) ended cancelled without running, no
attempt counted (WARNING); fields: job_id, task, queue, attempt, execution_id, worker_id,
duration, reason (how late it was)."""
JOB_TIMED_OUT: Final = "job_timed_out"
JOB_CRASHED: Final = "job_crashed"
CHILD_RECYCLED: Final = "child_recycled"
"""A process-pool child that may run several attempts (`max_jobs_per_child`) reported
its last and exits: worker_id, pid, jobs (the attempts it ran), rss (its resident
memory in bytes after the last), reason (`max_jobs_per_child`, `max_memory_per_child`)."""
JOB_RELEASED: Final = "job_released"
JOB_SNOOZED: Final = "job_snoozed"
"""Its task said it is too early (`heartq.Snooze`): the job is queued again, runnable in
`retry_in` seconds, the attempt not counted; `snoozes` is how many times the job snoozed
(this one included), `max_snoozes` its task's bound on those not counted (a snooze past it
is told as `job_failed`), `reason` what the task said. INFO: a snooze is the task's own
plan, not a fault."""
JOB_RECLAIMED: Final = "job_reclaimed"
"""A job taken back from an attempt whose holder is gone, queued again (one taken back
dead is `job_dead`, with the same `detected_by`); fields: job_id, task, attempt,
retry_in, previous_worker_id, detected_by."""
LEASE_LOST: Final = "lease_lost"
CLAIM_REPEATED: Final = "claim_repeated"
LEASES_UNTRUSTED: Final = "leases_untrusted"
RECLAIM_DETECTED: Final = "reclaim_detected"
"""A maintenance pass found jobs whose holder is gone and took them back (each then told
as `job_reclaimed` or `job_dead`): count, job_ids, detected_by (`DetectedBy`: which
mechanism found them), and where a worker was found gone with them, its worker_id and
heartbeat_age."""
RECONCILIATION_COMPLETE: Final = "reconciliation_complete"
HEARTBEAT_FAILED: Final = "heartbeat_failed"
PULSE_FAILED: Final = "pulse_failed"
HOOK_FAILED: Final = "hook_failed"
COMPLETION_RETRY: Final = "completion_retry"
MAINTENANCE_FAILED: Final = "maintenance_failed"
PRUNED: Final = "pruned"
SHUTDOWN_REQUESTED: Final = "shutdown_requested"
SIGNAL_RECEIVED: Final = "signal_received"
JOB_CANCEL_REQUESTED: Final = "job_cancel_requested"
CLAIM_FAILED: Final = "claim_failed"
HEARTBEAT: Final = "heartbeat"
METRICS_SERVER_STARTED: Final = "metrics_server_started"
NAMESAKE_ALIVE: Final = "namesake_alive"
LIVENESS_LOCK_LOST: Final = "liveness_lock_lost"
LIVENESS_LOCK_RESTORED: Final = "liveness_lock_restored"
TASKS_DECLARED: Final = "tasks_declared"
TRANSPORT_AVAILABLE: Final = "transport_available"
TRANSPORT_UNAVAILABLE: Final = "transport_unavailable"
TRANSPORT_READY: Final = "transport_ready"
"""Transport: a worker bound its consumers (`consumers`) on its deployment's `stream`
(`subjects`, `deployment`: the id stored in the queue's database), at start or once the
server answers again."""
TRANSPORT_DEGRADED: Final = "transport_degraded"
"""Transport: connected, but NATS does not deliver to this worker (`reason`: a short word;
`detail`: what happened, in NATS's words where it said any): a stream electing its
leader, a consumer or a node that does not answer. The worker claims from the database at
once and then at its poll interval; `transport_resumed` when NATS delivers again."""
TRANSPORT_RESUMED: Final = "transport_resumed"
"""Transport: NATS delivers to this worker again, after `degraded_for` seconds (`reason`:
the last one); it catches up from the database what NATS may have missed."""
TRANSPORT_STREAM_MISMATCH: Final = "transport_stream_mismatch"
"""Transport: the deployment's `stream` exists with settings other than the transport
URL gives (`differences`: replicas, storage, limits, each with the URL's word); heartq
uses it as it is (it changes nothing on a stream it did not make)."""
JOB_SKIPPED_ACTIVE_ELSEWHERE: Final = "job_skipped_active_elsewhere"
TASK_NOT_DECLARED: Final = "task_not_declared"
JOB_WAITING_FOR_TASK: Final = "job_waiting_for_task"
"""A worker claimed a job of a task it does not know, which another worker declared: the
job was given back (not counted as an attempt) for a worker that knows the task, runnable
again in `retry_in` seconds; `error` says which task."""
JOB_REPUBLISHED: Final = "job_republished"
"""Transport: a job the lease reclaimer, monitor or probe put back in the queue was published at
once, marked as a recovery (`recovery`: detected_by and reason; `published` false: left
to the sweeper)."""
JOB_ENDED_AFTER_COMMIT: Final = "job_ended_after_commit"
"""A task's `ctx.transaction()` committed its job (succeeded, effects saved), then its code
failed, timed out or was stopped: the job stays succeeded, with the result the task handed
to the commit (`result` "committed") or with its result lost (`result` "lost":
`App.result` raises `ResultLost`); fields: job_id, task, worker_id, ended, error, result."""
DASHBOARD_STARTED: Final = "dashboard_started"
"""`heartq dashboard` serves: `address`, `url` (password redacted), `actions` (read-only,
actions allowed, actions need the token)."""
DASHBOARD_ACTION: Final = "dashboard_action"
"""An action taken on the dashboard: `action` (cancel, replay, purge, sign_in_refused),
`job_ids`, `client` (its address)."""
STORE_UNAVAILABLE: Final = "store_unavailable"
"""The database stopped taking writes (or changed why): logged once per change of state,
with `reason` (`disk_full`, `read_only`, `file_gone`, `locked`, `unavailable`)."""
STORE_RECOVERED: Final = "store_recovered"
"""The database takes writes again, after `down_for` seconds."""
SHUTDOWN_SAVING: Final = "shutdown_saving"
"""Shutting down with outcomes or releases not yet saved: retrying until `deadline_in`."""
SHUTDOWN_UNSAVED: Final = "shutdown_unsaved"
"""Exiting with jobs not saved or released: the worker is left `active`, so the next
worker's liveness probe reclaims them at once."""
WAITING_FOR_DATABASE: Final = "waiting_for_database"
"""A starting worker could not use its database (down, full, starting up, locked) and
tries again after `retry_in` seconds; fields: worker_id, step, attempt, waited, retry_in,
error."""

QUEUE_CONTROLLED: Final = "queue_controlled"
"""An operator paused, resumed or scaled a queue through `App.pause_queue`,
`resume_queue` or `scale_queue` (the command line and the dashboard use them): `queue`,
`paused`, `concurrency` (each worker's cap; null: none), `by`."""
QUEUE_CONTROL_SEEN: Final = "queue_control_seen"
"""A worker read a change of one of its queues' controls and obeys it from now on
(within about a second of the change): `worker_id`, `queue`, `paused`, `concurrency`.
Also told at a worker's start for each of its queues that is paused or capped."""

SCHEDULE_CHANGED: Final = "schedule_changed"
"""An operator added, replaced, removed, paused or resumed a periodic schedule through
`App.add_schedule`, `remove_schedule`, `pause_schedule` or `resume_schedule` (the command
line and the dashboard use them): `schedule`, `change` (`added`, `replaced`, `removed`,
`paused`, `resumed`), `by`."""
SCHEDULE_SKIPPED: Final = "schedule_skipped"
"""A worker's scheduler does not run a runtime schedule (told once per schedule and
reason): a code schedule of the same name runs instead, its stored definition is not one
heartq can read, or its jobs could not be made (its task refuses its args): `worker_id`,
`schedule`, `reason`."""

EVENT_LOOP_BLOCKED: Final = "event_loop_blocked"
"""The async pool's event loop has not turned for `blocked_for` seconds (at least a
second): the coroutine of `job_id` (`task`, `execution_id`; null when no attempt's
coroutine held it) runs blocking code, and every other attempt of the pool waits. Its
heartbeats go on, and its `timeout` still ends it."""
EVENT_LOOP_RESUMED: Final = "event_loop_resumed"
"""The loop that `event_loop_blocked` told of turns again, after `blocked_for` seconds
held by `job_id`."""


# -- deprecated names --------------------------------------------------------------------
@dataclass(frozen=True)
class RenamedEvent:
    """An event name that changed: `old` is still heard by a listener that subscribes by
    it, as the events of `new` that `told` accepts (None: all of them)."""

    old: str
    new: str
    told: Callable[[dict[str, Any]], bool] | None = None

    def accepts(self, fields: dict[str, Any]) -> bool:
        return self.told is None or self.told(fields)


RENAMED_EVENTS: Final = {
    renamed.old: renamed
    for renamed in (
        RenamedEvent("job_reenqueued", JOB_RECLAIMED),
        # told by the lease reclaimer: no worker was found gone with the jobs
        RenamedEvent("stale_jobs_detected", RECLAIM_DETECTED, lambda f: "worker_id" not in f),
        # told with a worker found gone (liveness lock, staleness)
        RenamedEvent("orphaned_jobs_detected", RECLAIM_DETECTED, lambda f: "worker_id" in f),
    )
}
"""Old event name -> what it became (kept for one version, then removed)."""

_RENAMED_CONSTANTS = {
    "JOB_REENQUEUED": "JOB_RECLAIMED",
    "STALE_JOBS_DETECTED": "RECLAIM_DETECTED",
    "ORPHANED_JOBS_DETECTED": "RECLAIM_DETECTED",
}

if not TYPE_CHECKING:  # the type checker still refuses a misspelt name of this module

    def __getattr__(name: str) -> Any:
        """The old constants, with a `DeprecationWarning`: each is the new name, so a
        listener that compares `event.name` with it still matches the events it meant
        (a listener that subscribes by an old name as text hears them under it)."""
        if name in _RENAMED_CONSTANTS:
            new = _RENAMED_CONSTANTS[name]
            warnings.warn(
                f"heartq.events.{name} is deprecated: use heartq.events.{new} "
                f"({globals()[new]!r})",
                RenamedWarning,
                stacklevel=2,
            )
            return globals()[new]
        raise AttributeError(f"module 'heartq.events' has no attribute {name!r}")


class Event(NamedTuple):
    """One event as its stream's subscribers hear it: its `name` (one of the names
    above), its logging `level`, and its `fields` (the same dict for every subscriber:
    read it, never change it)."""

    name: str
    level: int
    fields: dict[str, Any]


Listener = Callable[[Event], None]
"""A subscriber of an app's events (`app.events.subscribe`)."""


def log_event(event: Event) -> None:
    """The log's subscriber, on every stream: `event` on the `heartq` logger, at its
    level, its fields in `record.heartq_fields` (the formatters below write them)."""
    logger.log(event.level, event.name, extra={"heartq_fields": event.fields})


log_wants: Callable[[int], bool] = logger.isEnabledFor
"""Whether the log takes events at a level (the `heartq` logger's, as `configure_logging`
or the application set it): the hot path builds a per-job event's fields only when some
subscriber wants them. The logger's own method: asked for every event."""


# -- deprecated: listeners of every app of the process ----------------------------------
ProcessListener = Callable[[str, dict[str, Any]], None]
_process_listeners: tuple[ProcessListener, ...] = ()


def add_listener(listener: ProcessListener) -> None:
    """Deprecated: call `listener(event, fields)` for every event of every app of this
    process until `remove_listener`. Subscribe to the app whose events you want instead
    (`app.events.subscribe(listener)`, where a listener takes one `Event`); a tool that
    wants every event of the process can read the `heartq` logger."""
    warnings.warn(
        "heartq.events.add_listener is deprecated: subscribe to an app's events with "
        "app.events.subscribe(listener) (the listener takes one heartq.Event)",
        DeprecationWarning,
        stacklevel=2,
    )
    global _process_listeners
    _process_listeners = (*_process_listeners, listener)


def remove_listener(listener: ProcessListener) -> None:
    """Deprecated with `add_listener`: stop calling `listener` (nothing if it is not
    listening)."""
    global _process_listeners
    _process_listeners = tuple(known for known in _process_listeners if known != listener)


def process_listeners() -> tuple[ProcessListener, ...]:
    """The deprecated listeners of every app (`add_listener`), for the streams to tell."""
    return _process_listeners


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "event": record.getMessage(),
        }
        doc.update(getattr(record, "heartq_fields", {}))
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%H:%M:%S", time.localtime(record.created))
        parts = [f"{ts}.{int(record.msecs):03d}", record.levelname.lower(), record.getMessage()]
        for key, value in getattr(record, "heartq_fields", {}).items():
            text = value if isinstance(value, str) else json.dumps(value, default=str)
            if isinstance(value, str) and (" " in value or not value):
                text = json.dumps(value)
            parts.append(f"{key}={text}")
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING}
"""The levels `heartq worker --log-level` takes."""


class _EventHandler(logging.StreamHandler[TextIO]):
    """Writes events to a stream of heartq's own, and never raises: a task may close or
    replace `sys.stderr` (its code runs in the worker's process), and logging's own
    error report writes there; an event that cannot be written is dropped, not turned
    into an exception in the thread that told it (the completer, the heartbeater)."""

    def handleError(self, record: logging.LogRecord) -> None:
        """Drop the record (see the class)."""


def _own_stderr() -> TextIO:
    """A stream on a duplicate of the process's standard error: it outlives whatever
    task code does to `sys.stderr` (closes it, replaces it). Where stderr has no file
    descriptor (an embedding host, a test's capture), `sys.stderr` itself."""
    try:
        fd = os.dup(sys.stderr.fileno())
    except (AttributeError, OSError, ValueError):
        return sys.stderr
    return open(fd, "w", buffering=1, encoding="utf-8", errors="backslashreplace")


def keep_last_resort(stream: TextIO | None = None) -> None:
    """What a library logs with no handler configured (psycopg_pool's warnings) goes to
    `logging.lastResort`, which writes to whatever `sys.stderr` is at that moment: once a
    task closed it, the write raised inside the library (a pool's maintenance, an attempt
    under way). In a worker's process (and a process-pool child) it writes to a stream of
    heartq's own instead (`stream`, or a new duplicate of stderr), and never raises."""
    last_resort = _EventHandler(stream or _own_stderr())
    last_resort.setLevel(logging.WARNING)
    logging.lastResort = last_resort


def configure_logging(fmt: str = "text", level: int = logging.INFO) -> None:
    """Send heartq's events to stderr as text or JSON lines."""
    if fmt not in ("text", "json"):
        raise ValueError(f"log format must be 'text' or 'json', got {fmt!r}")
    for old in logger.handlers:  # configured again: the stream it opened goes
        if isinstance(old, _EventHandler) and old.stream is not sys.stderr:
            old.stream.close()
    stream = _own_stderr()
    handler = _EventHandler(stream)
    keep_last_resort(stream)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    logger.handlers[:] = [handler]
    logger.setLevel(level)
    logger.propagate = False
