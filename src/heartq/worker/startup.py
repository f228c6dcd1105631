"""A starting worker waits for its database instead of exiting.

Fleets start together with their database (a deploy, a reboot, a restored volume): the
server is still starting up (57P03), refuses connections, is full ("too many clients",
53300), or a SQLite file is locked or its disk full. Each step of the worker's startup
that touches the database is retried until the database answers, with a backoff, each
retry logged (`waiting_for_database`). What waiting cannot fix (`StoreRefused`: a wrong
password, no such database; `ConfigError`: a malformed URL) fails at once.

The wait ends when the worker is told to stop (SIGTERM, `request_stop()`): at once,
between two attempts (an attempt in flight finishes first: a refused connection
returns at once, an unreachable host after the connect timeout). With a
`startup_timeout` it gives up after that many seconds with `StoreUnavailable`.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from heartq import events
from heartq.errors import ConfigError, StoreRefused, StoreUnavailable

if TYPE_CHECKING:
    from heartq.event_stream import EventStream

T = TypeVar("T")

RETRY_DELAY_MIN = 0.2
"""Defaults to 0.2 s before the second attempt; the delay doubles from there."""
RETRY_DELAY_MAX = 5.0
"""Defaults to at most 5 s between two attempts: a database that comes back is used within
5 s, and a fleet of waiting workers costs the server a few connection attempts a second."""


class StartupStopped(Exception):
    """The worker was told to stop while it waited for its database."""


def check_startup_timeout(value: float | None) -> float | None:
    """`startup_timeout` as given, or a `ConfigError` (None: wait as long as it takes)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"startup_timeout must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"startup_timeout must be 0 or more seconds, got {value!r}")
    return float(value)


class StartupWait:
    """Runs the steps of one worker's startup, each until the database lets it through;
    each wait told to the worker's `events`."""

    def __init__(
        self, worker_id: str, stop: threading.Event, timeout: float | None, events: EventStream
    ) -> None:
        self.worker_id = worker_id
        self.events = events
        self.stop = stop
        self.timeout = timeout
        self.started = time.monotonic()
        self.attempts = 0

    def step(self, name: str, fn: Callable[[], T]) -> T:
        """`fn()`, retried while it fails with an error that may pass.

        Raises `StartupStopped` once a stop is requested, `StoreUnavailable` once the
        timeout is spent, and at once what waiting will not fix."""
        delay = RETRY_DELAY_MIN
        while True:
            if self.stop.is_set():
                raise StartupStopped
            try:
                return fn()
            except (StoreRefused, ConfigError):
                raise
            except StoreUnavailable as exc:
                error = str(exc)
            self.attempts += 1
            waited = time.monotonic() - self.started
            wait = delay * random.uniform(0.75, 1.0)
            if self.timeout is not None:
                left = self.timeout - waited
                if left <= 0:
                    raise StoreUnavailable(
                        f"gave up waiting for the database after {self.timeout:g} s "
                        f"(startup_timeout): {error}"
                    )
                wait = min(wait, left)
            self.events.emit(
                events.WAITING_FOR_DATABASE,
                logging.WARNING,
                worker_id=self.worker_id,
                step=name,
                attempt=self.attempts,
                waited=round(waited, 3),
                retry_in=round(wait, 3),
                error=error,
            )
            if self.stop.wait(wait):
                raise StartupStopped
            delay = min(delay * 2, RETRY_DELAY_MAX)
