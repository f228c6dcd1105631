"""Waiting for a job's end: `App.result()` and `App.result_async()`.

A waiter first marks the job awaited (`Store.await_end`): where the backend can announce
ends (PostgreSQL: a NOTIFY on the schema's ends channel, sent with the write that ends an
awaited job, or right after a worker's finish, and only for those), the waiter sleeps
until told, re-reading the job once a second in case a notification was missed;
elsewhere (SQLite) it polls, every 20 ms at first and backing off to every 0.5 s. The
async waiter never holds a thread while it waits: only its short reads go to a thread.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from heartq.errors import JobCancelled, JobDead, ResultLost, ResultTimeout
from heartq.model import JobEnd, JobStatus
from heartq.store.interface import Inspector
from heartq.store.link import LivenessHandle

FIRST_POLL = 0.02
"""Seconds before the first re-read of a job nobody announces the end of."""
MAX_POLL = 0.5
"""Polling backs off to one read every 0.5 s."""
ANNOUNCED_RECHECK = 1.0
"""With announcements, the job is re-read once a second anyway (a missed notification
costs at most that)."""


def outcome(end: JobEnd) -> Any:
    """The result of an ended job, or the error that says why there is none: for a job a
    dead job holds (blocked, itself or a job it waits for), that dead job's own error;
    for a job that succeeded without its result (lost after its task's transaction
    committed it: `heartq.lost_results`), `ResultLost`, never a bare None."""
    if end.held_by is not None:
        root = end.held_by
        raise JobDead(root.job_id, root.error, root.dead_reason, blocked=end.job_id)
    if end.status is JobStatus.SUCCEEDED:
        if end.result_lost is not None:
            raise ResultLost(end.job_id, end.result_lost)
        return end.result
    if end.status is JobStatus.DEAD:
        raise JobDead(end.job_id, end.error, end.dead_reason)
    raise JobCancelled(end.job_id, end.error, end.cancelled_by)


class Pace:
    """When a waiter next re-reads its job: at once when told, else after the next pause
    (a second with announcements; 20 ms backing off to 0.5 s without), never past the
    deadline, which raises `ResultTimeout` once reached. Both waiters use it."""

    def __init__(self, job_id: str, timeout: float | None, announced: bool) -> None:
        self.job_id = job_id
        self.timeout = timeout
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.announced = announced
        self.pause = FIRST_POLL

    def next_wait(self, end: JobEnd) -> float:
        """Seconds to sleep (or until woken) before the next read."""
        left = None if self.deadline is None else self.deadline - time.monotonic()
        if left is not None and left <= 0:
            raise ResultTimeout(self.job_id, self.timeout or 0.0, end.status)
        step = ANNOUNCED_RECHECK if self.announced else self.pause
        self.pause = min(MAX_POLL, self.pause * 1.5)
        return step if left is None else min(step, left)


class EndWaiters:
    """The waiters of one `App`: one ends listener for all of them, opened on first use."""

    def __init__(self, store: Callable[[], Inspector]) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._waiting: dict[str, list[Callable[[], None]]] = {}
        self._listener: LivenessHandle | None = None
        self._announced: bool | None = None  # unknown until the first wait

    def _subscribe(self, job_id: str, wake: Callable[[], None]) -> bool:
        """Register `wake` for the job's end; whether ends are announced."""
        with self._lock:
            if self._announced is None:
                self._listener = self._store().link.listen_ends(self._on_end)
                self._announced = self._listener is not None
            self._waiting.setdefault(job_id, []).append(wake)
            return self._announced

    def _unsubscribe(self, job_id: str, wake: Callable[[], None]) -> None:
        with self._lock:
            wakes = self._waiting.get(job_id, [])
            if wake in wakes:
                wakes.remove(wake)
            if not wakes:
                self._waiting.pop(job_id, None)

    def _on_end(self, job_id: str | None) -> None:
        with self._lock:
            if job_id is None:
                wakes = [w for ws in self._waiting.values() for w in ws]
            else:
                wakes = list(self._waiting.get(job_id, []))
        for wake in wakes:
            wake()

    def close(self) -> None:
        with self._lock:
            listener, self._listener, self._announced = self._listener, None, None
        if listener is not None:
            listener.close()

    def wait(self, job_id: str, timeout: float | None) -> Any:
        store = self._store()
        woken = threading.Event()
        pace = Pace(job_id, timeout, self._subscribe(job_id, woken.set))
        try:
            end = store.await_end(job_id)
            while not end.ended:
                woken.wait(pace.next_wait(end))
                woken.clear()
                end = store.job_end(job_id)
        finally:
            self._unsubscribe(job_id, woken.set)
        return outcome(end)

    async def wait_async(self, job_id: str, timeout: float | None) -> Any:
        # Imported here, on the event loop that runs this, where asyncio is loaded already:
        # a process that never waits from asyncio code (a command) does not pay for it.
        import asyncio

        store = self._store()
        loop = asyncio.get_running_loop()
        woken = asyncio.Event()

        def wake() -> None:
            loop.call_soon_threadsafe(woken.set)

        pace = Pace(job_id, timeout, await asyncio.to_thread(self._subscribe, job_id, wake))
        try:
            end = await asyncio.to_thread(store.await_end, job_id)
            while not end.ended:
                # Outside the suppress: ResultTimeout is a TimeoutError too.
                pause = pace.next_wait(end)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), pause)
                woken.clear()
                end = await asyncio.to_thread(store.job_end, job_id)
        finally:
            self._unsubscribe(job_id, wake)
        return outcome(end)
