"""Tells when a task blocks the async pool's event loop, and which one.

A coroutine that calls `time.sleep` (or any blocking code) holds the loop: no other
attempt of the pool makes progress, and the pool cannot cancel it, until it yields. Its
heartbeats and pulse go on (they run on threads of their own), and its `timeout` still
ends it (the supervisor decides the end; the slot stays taken until the code yields, as a
thread's does). What was missing is the word: an operator saw a worker whose async jobs
all stalled, with nothing in the log.

The loop stamps the time on every turn of a callback scheduled each `TURN` seconds; a
thread of its own looks at that stamp, and once it is older than `BLOCKED_AFTER` tells
`event_loop_blocked` (the job whose coroutine holds the loop, how long so far), then,
when the loop turns again, `event_loop_resumed` (how long it was held in all).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from heartq.background import BackgroundLoop, FailureLog
from heartq.event_stream import EventStream
from heartq.events import EVENT_LOOP_BLOCKED, EVENT_LOOP_RESUMED, MAINTENANCE_FAILED
from heartq.worker.attempt import RunningJob

TURN = 0.1
"""Seconds between two stamps of the loop's time while it turns freely."""

BLOCKED_AFTER = 1.0
"""A loop that has not turned for this long is blocked: long enough that an ordinary
callback never reaches it on a loaded machine, short enough to name the culprit while it
still holds the loop."""


class LoopWatch:
    """Watches `loop`; `culprit(task)` is the attempt an asyncio task runs, if any. What
    it sees is told to the worker's `events`."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        culprit: Callable[[asyncio.Task[None]], RunningJob | None],
        worker_id: str,
        events: EventStream,
    ) -> None:
        self.events = events
        self._loop = loop
        self._culprit = culprit
        self._worker_id = worker_id
        self._turned = time.monotonic()
        self._blocked: tuple[float, RunningJob | None] | None = None  # since, by whom
        self._thread = BackgroundLoop(
            "heartq-loop-watch",
            self.look,
            wait=TURN,
            failed=FailureLog(
                events, MAINTENANCE_FAILED, {"service": "loop_watch", "worker_id": worker_id}
            ),
            join_timeout=1,
        )

    def start(self) -> None:
        self._loop.call_soon_threadsafe(self._stamp)
        self._thread.start()

    def stop(self) -> None:
        self._thread.stop()

    def _stamp(self) -> None:
        """On the loop: it turned."""
        self._turned = time.monotonic()
        self._loop.call_later(TURN, self._stamp)

    def look(self) -> None:
        """One look from the watch's thread."""
        held = time.monotonic() - self._turned
        if self._blocked is None:
            if held >= BLOCKED_AFTER:
                task = asyncio.current_task(self._loop)
                run = self._culprit(task) if isinstance(task, asyncio.Task) else None
                self._blocked = (self._turned, run)
                self._tell(EVENT_LOOP_BLOCKED, run, held)
        elif held < BLOCKED_AFTER:
            since, run = self._blocked
            self._blocked = None
            self._tell(EVENT_LOOP_RESUMED, run, self._turned - since)

    def _tell(self, event: str, run: RunningJob | None, held: float) -> None:
        job = run.job if run is not None else None
        self.events.emit(
            event,
            logging.WARNING,
            worker_id=self._worker_id,
            job_id=job.id if job else None,
            task=job.task if job else None,
            execution_id=job.execution_id if job else None,
            blocked_for=round(held, 3),
        )
