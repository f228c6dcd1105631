"""An app's event stream (`app.events`): each event told once, to every subscriber of it.

Whatever an app's workers, enqueues and hooks have to tell (the names of
`heartq.events`) is emitted once, to the stream of that app, and its subscribers hear
it there, each in the order it subscribed:

- the log (`heartq.events.log_event`), subscribed when the stream is made: the `heartq`
  logger, where `heartq worker --log-format` (`configure_logging`) or the application's
  own logging configuration sends it;
- a worker's Prometheus metrics (`heartq worker --metrics-port`, `heartq.metrics`);
- `heartq.testing`'s drain, `heartq reclaim --app`, a user's own listeners
  (`app.events.subscribe(listener)`: `listener(event)` with one `heartq.Event`).

Hooks are the stream's other kind of subscriber (`stream.hooks`, which is `app.hooks`):
code that runs around what it observes, where it runs (an enqueue, an attempt in its
thread or child process, a crash in the worker that found it), the user's own and
OpenTelemetry's (`heartq.otel.instrument`). A hook that fails is an event of the same
stream (`hook_failed`).

Two apps in one process have two streams: each hears only its own app's events. A
process-wide listener is the deprecated `heartq.events.add_listener`; what the whole
process logs is the `heartq` logger.

Why subscribers on the app rather than one list for the process: an embedding program,
or a test, with two apps (two queues, two databases) tells their events apart without
filtering by worker id, and a listener goes with the app that owns it (Oban's telemetry
is one stream its logger, its error reporter and users all subscribe to).
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from heartq import events
from heartq.errors import RenamedWarning
from heartq.events import Event, Listener
from heartq.hooks import Hooks, run_crash_hooks
from heartq.model import DeactivatedWorker, JobStatus, Reclaimed

logger = events.logger

Wants = Callable[[int], bool]
"""Whether a subscriber wants the events of a logging level (None: every event)."""
Heard = Callable[[Event], "Event | None"]
"""What a subscriber by name hears of an event: the event, as it knows it, or None."""


class EventStream:
    """One app's events and their subscribers (see the module's docstring). A stream of
    no app (the dashboard, `heartq reclaim` without `--app`) has the log alone."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: tuple[tuple[Listener, Wants | None, Heard | None], ...] = (
            (events.log_event, events.log_wants, None),
        )
        self.hooks = Hooks(self.emit)
        """The hooks that observe this stream's app (`app.hooks`, `heartq.hooks`)."""

    # -- subscribers -----------------------------------------------------------------------
    def subscribe(
        self,
        listener: Listener,
        *,
        wants: Wants | None = None,
        names: Iterable[str] | None = None,
    ) -> Listener:
        """Call `listener(event)` for every event of this stream from now on (usable as a
        decorator); returns it unchanged. `wants(level)`: whether it wants the events of
        that logging level (the log's is the `heartq` logger's level); without it, every
        event, DEBUG ones included. `names`: only the events of these names. A name that
        changed (`heartq.events.RENAMED_EVENTS`) is still heard by its old name, with a
        `DeprecationWarning` here. A listener runs in the thread that emits (a worker's
        fetch loop, heartbeat, completer, maintenance): keep it quick and thread-safe.
        One that raises is skipped, never the emitter's error."""
        if not callable(listener):
            raise TypeError(f"an event listener must be callable, got {listener!r}")
        heard = None if names is None else _named(names)
        with self._lock:
            self._subscribers = (*self._subscribers, (listener, wants, heard))
        return listener

    def unsubscribe(self, listener: Listener) -> None:
        """Stop calling `listener` (its first subscription); `ValueError` if it is not
        subscribed. `heartq.events.log_event` unsubscribed: this app's events are not
        logged. The subscribers are replaced, not changed in place: an event being told
        meanwhile reaches them as they were."""
        with self._lock:
            for index, (known, _, _) in enumerate(self._subscribers):
                if known == listener:
                    self._subscribers = self._subscribers[:index] + self._subscribers[index + 1 :]
                    return
        raise ValueError(f"{listener!r} is not subscribed to these events")

    def __len__(self) -> int:
        """How many subscriptions the stream has, the log's included."""
        return len(self._subscribers)

    def wanted(self, level: int) -> bool:
        """Whether an event at `level` reaches any subscriber: the hot path builds a
        per-job event's fields only then (a no-op job's DEBUG events cost a tenth of a
        busy worker's time to build and drop)."""
        for _, wants, _ in self._subscribers:
            if wants is None or wants(level):
                return True
        return bool(events.process_listeners())

    # -- telling ---------------------------------------------------------------------------
    def emit(self, name: str, level: int = logging.INFO, /, **fields: Any) -> None:
        """Tell event `name` with `fields` to every subscriber that wants `level`; cheap
        when none does."""
        told: Event | None = None  # made for the first subscriber that wants it
        for listener, wants, heard in self._subscribers:
            if wants is not None and not wants(level):
                continue
            if told is None:
                told = Event(name, level, fields)
            try:
                if heard is None:
                    listener(told)
                elif (as_heard := heard(told)) is not None:
                    listener(as_heard)
            except Exception:  # a subscriber's error is never the emitter's
                logger.debug("event listener failed", exc_info=True)
        for legacy in events.process_listeners():
            try:
                legacy(name, fields)
            except Exception:
                logger.debug("event listener failed", exc_info=True)

    def reclaimed(self, reclaimed: Sequence[Reclaimed], detected_by: str) -> None:
        """Jobs taken back from attempts their workers can no longer report, told the
        same way by every finder (the maintenance services, startup reconciliation, the
        worker's heartbeater and completer when they hand an attempt back), so an
        operator's alert on `job_dead` sees the same fields (`detected_by` among them)
        whoever found it."""
        for job in reclaimed:
            if job.status is JobStatus.DEAD:
                self.emit(
                    events.JOB_DEAD,
                    logging.WARNING,
                    job_id=job.job_id,
                    task=job.task,
                    attempt=job.attempts,
                    reason=job.dead_reason,
                    detected_by=detected_by,
                )
            else:
                self.emit(
                    events.JOB_RECLAIMED,
                    job_id=job.job_id,
                    task=job.task,
                    attempt=job.attempts,
                    retry_in=round(job.retry_delay, 3),
                    previous_worker_id=job.worker_id,
                    detected_by=detected_by,
                )

    def deactivated(self, workers: Sequence[DeactivatedWorker], detected_by: str) -> None:
        """Workers found gone or stale and marked inactive, and the jobs taken from them
        (`reclaim_detected`, then each as `reclaimed` tells it)."""
        for worker in workers:
            self.emit(
                events.WORKER_DEACTIVATED,
                logging.WARNING,
                worker_id=worker.id,
                name=worker.name,
                heartbeat_age=round(worker.heartbeat_age, 3),
                detected_by=detected_by,
                jobs=len(worker.reclaimed),
            )
            if worker.reclaimed:
                self.emit(
                    events.RECLAIM_DETECTED,
                    logging.WARNING,
                    count=len(worker.reclaimed),
                    job_ids=[j.job_id for j in worker.reclaimed],
                    detected_by=detected_by,
                    worker_id=worker.id,
                    heartbeat_age=round(worker.heartbeat_age, 3),
                )
            self.reclaimed(worker.reclaimed, detected_by)

    def stale_workers(self, workers: Sequence[DeactivatedWorker], detected_by: str) -> None:
        """Deprecated name of `deactivated`."""
        warnings.warn(
            "EventStream.stale_workers is deprecated: use EventStream.deactivated",
            RenamedWarning,
            stacklevel=2,
        )
        self.deactivated(workers, detected_by)

    def crashed(self, reclaimed: Sequence[Reclaimed]) -> None:
        """The crash hooks of the attempts of `reclaimed` that crashed (`run_crash_hooks`),
        run by the finder once what it found is told and its jobs queued again are on
        their way (a hook waits for nothing, a job queued again waits for its hooks)."""
        run_crash_hooks(self.hooks.crash, reclaimed)


def _named(names: Iterable[str]) -> Heard:
    """The filter of a subscriber by `names`: each old name (`RENAMED_EVENTS`) hears the
    events of its new one that it would have told, under the old name."""
    wanted = {names} if isinstance(names, str) else set(names)
    renamed: dict[str, list[events.RenamedEvent]] = {}
    for name in sorted(wanted & events.RENAMED_EVENTS.keys()):
        became = events.RENAMED_EVENTS[name]
        warnings.warn(
            f"the event {name!r} is deprecated: subscribe to {became.new!r}",
            RenamedWarning,
            stacklevel=3,
        )
        renamed.setdefault(became.new, []).append(became)
        wanted.discard(name)

    def heard(event: Event) -> Event | None:
        if event.name in wanted:
            return event
        for became in renamed.get(event.name, ()):
            if became.accepts(event.fields):
                return event._replace(name=became.old)
        return None

    return heard
