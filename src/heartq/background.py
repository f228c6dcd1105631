"""One background loop: a named daemon thread that runs a pass, sleeps, and runs it again.

A worker keeps several such threads (heartbeat, supervisor, maintenance). Each must
outlive any failure of its own pass: a pass that raises is logged under the loop's
event (`heartbeat_failed`, `maintenance_failed`) and the loop carries on after its
usual wait, so a bug or a database blip in one pass never ends the thread. What differs
between the loops is a parameter here: how long to wait (a fixed interval, or what the
loop computes after each pass), whether the first pass waits one interval first, which
event wakes it early, and how long `stop()` waits for a pass under way.

This module sits below `worker/` and `maintenance/`, so it imports nothing of heartq
but the events' stream (for its type).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from heartq.event_stream import EventStream


def _error_level(exc: Exception) -> int:
    return logging.ERROR


@dataclass(frozen=True)
class FailureLog:
    """How a failed pass is told to the worker's `events`: `event` with `fields`, then
    `error=describe(exc)`, at `level(exc)` (a loop may log a known database state lower,
    as `StoreHealth` says)."""

    events: EventStream
    event: str
    fields: Mapping[str, Any] = field(default_factory=dict)
    level: Callable[[Exception], int] = _error_level
    describe: Callable[[Exception], str] = repr

    def emit(self, exc: Exception) -> None:
        self.events.emit(self.event, self.level(exc), **self.fields, error=self.describe(exc))


class BackgroundLoop:
    """Runs `step` on its own daemon thread named `name` until `stop()`.

    `wait`: seconds between the end of a pass and the next, or a function that says so
    after each pass, whether it succeeded or failed. `wait_first`: wait that
    long before the first pass too (else the first pass runs at once). `wake`: an event
    that ends a wait early (it is cleared after each wait; `stop()` sets it); without
    one the loop waits on its stop event alone. `failed`: how a pass that raised is
    logged; the loop then goes on as after any pass. `join_timeout`: how long `stop()`
    waits for a pass under way to end."""

    def __init__(
        self,
        name: str,
        step: Callable[[], object],
        *,
        wait: float | Callable[[], float],
        failed: FailureLog,
        join_timeout: float,
        wait_first: bool = False,
        wake: threading.Event | None = None,
    ) -> None:
        self._step = step
        self._wait = wait
        self._failed = failed
        self._join_timeout = join_timeout
        self._wait_first = wait_first
        self._wake = wake
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Ask the loop to end after the pass under way, and wait for it (at most
        `join_timeout`). Safe before `start()` and more than once."""
        self._stop.set()
        if self._wake is not None:
            self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self._join_timeout)

    def _run(self) -> None:
        if self._wait_first and self._sleep():
            return
        while not self._stop.is_set():
            try:
                self._step()
            except Exception as exc:  # noqa: BLE001 - a failed pass must not end the loop
                self._failed.emit(exc)
            if self._sleep():
                return

    def _sleep(self) -> bool:
        """Wait until the next pass is due or the wake event is set; True once stopped."""
        seconds = self._wait() if callable(self._wait) else self._wait
        if self._wake is None:
            return self._stop.wait(seconds)
        self._wake.wait(seconds)
        self._wake.clear()
        return self._stop.is_set()
