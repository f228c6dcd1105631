"""Wake-ups published in the background: an enqueue answers right after its commit,
whatever NATS is doing (docs/NATS.md, "How it fails safe").

Before, `App.enqueue` published on the caller's thread and waited for the stream's ack
up to 5 s: on a cluster electing a stream leader, or with the client's node frozen, an
`enqueue_many` that had committed blocked 5.0 s. The database is the outbox, so nothing
needs that wait: the caller hands the wake-ups to this queue and returns.

The queue is bounded (`LIMIT` wake-ups; past it the oldest are dropped), and drained by
one task on the transport's event loop, in batches published concurrently, each batch
bounded (`PUBLISH_TIMEOUT`). A wake-up that failed is tried again, sooner than the
sweeper would (after 0.25 s, then doubling to 2 s), until it is `republish_after` old;
then, and when dropped, it is left to the workers' sweepers, which publish every job
queued that long (`republish_after`). Every failure is also told to the transport
(`on_failed`), whose worker's sweeper then publishes what waits at its next pass rather
than after `republish_after`.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

LIMIT = 100_000
"""The most wake-ups waiting to be published; past it the oldest are dropped (their jobs
are in the database: the sweeper publishes them)."""
BATCH = 1000
"""The most wake-ups one round publishes concurrently."""
PUBLISH_TIMEOUT = 1.0
"""The longest one round of publishes waits for the stream's acks."""
RETRY_FIRST, RETRY_MAX = 0.25, 2.0


@dataclass
class Wakeup:
    """One message to publish: its subject and body, when it was handed over."""

    subject: str
    body: bytes
    stream: str
    since: float
    """When the enqueue handed it over (monotonic)."""


Send = Callable[[Sequence[Wakeup]], Awaitable[list[bool]]]
"""Publishes a batch on the event loop, one answer per wake-up (True: acked)."""


class Publisher:
    """The background queue of wake-ups of one transport (module docstring). `put` is
    called from any thread; `run` is the task on the transport's loop."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        send: Send,
        ready: Callable[[], bool],
        max_age: float,
        on_failed: Callable[[], None],
    ) -> None:
        self._loop = loop
        self._send = send
        self._ready = ready
        self._max_age = max_age
        self._on_failed = on_failed
        self._waiting: collections.deque[Wakeup] = collections.deque(maxlen=LIMIT)
        self._lock = threading.Lock()
        self._wake = asyncio.Event()
        self._idle = threading.Event()
        self._idle.set()
        self.dropped = 0
        """Wake-ups given up on (too old, or pushed out of a full queue): the sweeper's."""

    def put(self, wakeups: Sequence[Wakeup]) -> None:
        """Hand wake-ups over (never blocks, never raises)."""
        with self._lock:
            overflow = max(0, len(self._waiting) + len(wakeups) - LIMIT)
            self.dropped += overflow
            self._waiting.extend(wakeups)
            self._idle.clear()
        if overflow:
            self._on_failed()
        self._loop.call_soon_threadsafe(self._wake.set)

    def wait_idle(self, timeout: float) -> bool:
        """Until every wake-up handed over was published or given up on (for `close`:
        an app that enqueues and exits has its wake-ups sent), at most `timeout`."""
        return self._idle.wait(timeout)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    async def run(self) -> None:
        """Publish what is handed over, until cancelled."""
        delay = RETRY_FIRST
        while True:
            with self._lock:  # `put` clears `_idle` under it: never set over a new one
                empty = not self._waiting
                if empty:
                    self._idle.set()
            if empty:
                await self._wake.wait()
                self._wake.clear()
                continue
            if not self._ready():
                self._give_up_old()
                await self._pause(delay)
                continue
            with self._lock:
                batch = [self._waiting.popleft() for _ in range(min(BATCH, len(self._waiting)))]
            try:
                answers = await asyncio.wait_for(self._send(batch), PUBLISH_TIMEOUT)
            except Exception:  # noqa: BLE001 - the whole batch failed (or timed out)
                answers = [False] * len(batch)
            failed = [w for w, ok in zip(batch, answers, strict=True) if not ok]
            if not failed:
                delay = RETRY_FIRST
                continue
            self._on_failed()
            with self._lock:
                self._waiting.extendleft(reversed(failed))
            self._give_up_old()
            await self._pause(delay)
            delay = min(RETRY_MAX, delay * 2)

    async def _pause(self, delay: float) -> None:
        """Wait `delay` before trying again (new wake-ups do not cut it short: the
        server that failed them will not answer sooner for them)."""
        await asyncio.sleep(delay)

    def _give_up_old(self) -> None:
        """Drop what has waited `max_age`: the workers' sweepers publish it by now."""
        horizon = time.monotonic() - self._max_age
        with self._lock:
            old = 0
            while self._waiting and self._waiting[0].since < horizon:
                self._waiting.popleft()
                old += 1
            self.dropped += old
            if not self._waiting:
                self._idle.set()
