"""When the fetch loop wakes: at once for work runnable now, and at the moments the worker
knows a job of its queues falls due, rather than at its next poll.

An idle worker sleeps for its poll interval (1 s by default) unless woken. A job that
waits (a delay, an eta, a retry's backoff) is runnable only from its `run_at`, and no
enqueue wakes anyone then: found by a poll, it started up to a poll interval late, on
PostgreSQL too (a 0.5 s delay started after 1.0 s, `delay=3` after 3.9-4.0 s). Yet the
worker often knows the moment:

- a retry it scheduled itself: its completer saved the attempt's end with the retry's
  wait (`Completer`, `on_retry`), and a reclaim of its maintenance's with the retry's
  wait (`retry_in`);
- a job enqueued with a delay or an eta in its own process (the app's producer tells
  its subscribers, `Waker.due_in`);
- on PostgreSQL, a job enqueued with a delay by any other process: the enqueue's
  NOTIFY on the schema's due channel carries how long until it falls due
  (`Link.listen`'s `on_due`).

`DueWakeups` keeps those moments (on this process's monotonic clock, each from when the
worker heard of it, so never before the database's `run_at`) and shortens the fetch
loop's sleep to the earliest, just after it (`WAKE_MARGIN`), as the claim's `rate_wait`
shortens it for a job its rate limit holds back. A moment heard while the loop sleeps
past it wakes the loop, which sleeps again until then. A moment the worker could not
use (its slots were full; another worker took the job) is dropped once past: the poll
remains the backstop. On SQLite a job another process enqueued is found at the next
poll, delayed or not: nothing tells a worker of another process's commit.
"""

from __future__ import annotations

import heapq
import math
import threading
import time

WAKE_MARGIN = 0.005
"""The loop wakes this much after a due moment: its claim's statement then runs once the
job's `run_at` has passed by the database's clock (each moment is already counted from
when the worker heard of it, after the database dated the job)."""
MIN_SLEEP = 0.001
"""...and sleeps at least this long, so a moment that just passed cannot spin it."""
MAX_MOMENTS = 10_000
"""At most this many moments are kept (a burst of retries): one more than that is left
to the poll."""


class DueWakeups:
    """The moments this worker knows jobs of its queues fall due, and the fetch loop's
    sleep until the earliest (or its poll). Thread-safe: the completer, the maintenance,
    the listener's thread and an enqueuing thread of the process add moments; the fetch
    loop sleeps. `wake` is the loop's event (set: a round at once)."""

    def __init__(self, wake: threading.Event) -> None:
        self.wake = wake
        self._lock = threading.Lock()
        self._moments: list[float] = []  # a heap
        self._sleeping_until = -math.inf  # when the loop's current sleep ends

    def set(self) -> None:
        """Jobs are runnable now: a round at once (`Waker.set`)."""
        self.wake.set()

    def due_in(self, seconds: float) -> None:
        """A job of the worker's queues falls due `seconds` from now (`Waker.due_in`)."""
        if not math.isfinite(seconds):
            return
        if seconds <= 0:
            self.wake.set()
            return
        self.due_at(time.monotonic() + seconds)

    def due_at(self, moment: float) -> None:
        """A job falls due at `moment` (monotonic): the loop wakes just after it, at once
        if it sleeps past it now."""
        with self._lock:
            if len(self._moments) >= MAX_MOMENTS:
                return
            heapq.heappush(self._moments, moment)
            sooner = moment + WAKE_MARGIN < self._sleeping_until
        if sooner:
            self.wake.set()  # the loop goes round once and sleeps again until then

    def sleep_for(self, idle: float) -> float:
        """How long the fetch loop sleeps now, unless woken: `idle` (its poll interval,
        or less: a rate limit's wait), or until just after the earliest due moment. The
        moments past are dropped: this round was the one they woke."""
        now = time.monotonic()
        with self._lock:
            moments = self._moments
            while moments and moments[0] <= now:
                heapq.heappop(moments)
            wait = idle
            if moments:
                wait = min(idle, max(MIN_SLEEP, moments[0] - now + WAKE_MARGIN))
            self._sleeping_until = now + wait
        return wait

    @property
    def pending(self) -> int:
        """How many moments are kept (tests)."""
        with self._lock:
            return len(self._moments)
