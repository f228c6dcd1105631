"""How the fetch loop gets work: one strategy, chosen once when the worker is built.

Every strategy answers one `round` of the loop with a `Round`; `Worker.run` does the
rest the same way for all of them (go on at once, end a drained burst run, or sleep
until woken). Chosen once because the mode never changes while a worker runs, and so
that the loop carries no branch per mode:

- `ClaimFetch`: a database claim for the free slots (the default).
- `ClaimAheadFetch`: with `prefetch` N, the free slots are filled from the buffer of
  jobs claimed ahead first, and a claim also refills the buffer once it is down to
  half (docs/DESIGN.md, "Claim ahead").
- `TransportFetch` (`transport_fetch.py`): a transport's messages name the jobs to
  claim; a `ClaimFetch` runs when the transport cannot deliver, and as its backstop.

The statements themselves (claim, start of buffered jobs, release, starting what was
claimed) are the `Claimer`'s, whichever strategy asks for them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from heartq.model import Reclaimed
from heartq.worker.claimer import Claimer
from heartq.worker.ledger import Ledger


@dataclass(frozen=True)
class Round:
    """What one round of the fetch loop did, for `Worker.run` to decide what comes next."""

    claimed: int = 0
    """Jobs started or claimed (0: nothing found, so a burst run asks whether it is done)."""
    busy: bool = False
    """Go round again at once, burst run or not: every free slot was filled, or the
    transport delivered (or was waited on)."""
    rate_wait: float | None = None
    """The claim's `rate_wait`: seconds until a job a rate limit held back may start."""
    idle: float | None = None
    """Unless `busy`: how long to sleep before the next round unless woken (a freed
    slot, an enqueue, a stop); None: no sleep (the transport delivers again at once)."""


class Fetch(Protocol):
    """A fetch strategy: what `Worker.run` calls, whichever way jobs come."""

    def prepare(self, stop: threading.Event) -> None:
        """Make ready once the worker's threads run (before the first round)."""
        ...

    def round(self, burst: bool) -> Round:
        """Fetch once: start what fits in the free slots."""
        ...

    @property
    def on_requeued(self) -> Callable[[list[Reclaimed]], None] | None:
        """Told of the jobs the worker's maintenance put back in the queue, if this way
        of fetching must hear of them (a transport publishes them at once); None: the
        next claim finds them in the database."""
        ...


class ClaimFetch:
    """Fill the free slots with one database claim a round (backpressure: never more
    than the worker can run)."""

    on_requeued: Callable[[list[Reclaimed]], None] | None = None

    def __init__(self, claimer: Claimer, ledger: Ledger) -> None:
        self.claimer = claimer
        self.ledger = ledger

    def prepare(self, stop: threading.Event) -> None:
        """Nothing to prepare: the worker's startup has reached the database."""

    def round(self, burst: bool) -> Round:
        self.claimer.release_given_back()
        return self._claim(self.ledger.free_slots(), started=0, ahead=0)

    def _claim(self, free: int, started: int, ahead: int) -> Round:
        """Claim for the `free` slots but the `started` ones, and `ahead` more jobs."""
        left = free - started
        if left <= 0 and ahead <= 0:
            return self._round(started, full=free > 0)
        jobs = self.claimer.claim(for_slots=left > 0, ahead=ahead)
        if jobs is None:  # the database did not answer (the claimer waited a moment)
            return self._round(started, full=False)
        filled = free > 0 and started + len(jobs) >= free
        return self._round(started + len(jobs) + len(jobs.ahead), filled, jobs.rate_wait)

    def _round(self, claimed: int, full: bool, rate_wait: float | None = None) -> Round:
        idle = self.claimer.idle_wait(rate_wait)
        return Round(claimed=claimed, busy=full, rate_wait=rate_wait, idle=idle)


class ClaimAheadFetch(ClaimFetch):
    """With `prefetch` N: a freed slot takes the best job claimed ahead, whose start is
    recorded in the database first (`Claimer.start_ahead`), and a claim also takes up to
    N jobs ahead into the buffer, again only once the buffer is down to half (a claim
    per job would cost what claiming ahead saves)."""

    def __init__(self, claimer: Claimer, ledger: Ledger, prefetch: int) -> None:
        super().__init__(claimer, ledger)
        self.prefetch = prefetch

    def round(self, burst: bool) -> Round:
        self.claimer.release_given_back()
        free = self.ledger.free_slots()
        started = 0
        if free > 0 and self.ledger.buffered():
            started = self.claimer.start_ahead(free)
            if started < 0:  # the database did not answer: wait as after a failed claim
                return self._round(0, full=False)
        buffered = self.ledger.buffered()
        refill = free - started > 0 or buffered <= self.prefetch // 2
        return self._claim(free, started, self.prefetch - buffered if refill else 0)
