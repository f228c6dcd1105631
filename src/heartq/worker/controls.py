"""What an operator decided of this worker's queues (`heartq.queue_controls`), read once
a second and obeyed by the claim.

Why a loop of its own and not the pulse's: the pulse runs for the attempts a worker
holds and is idle when it holds none, while a paused queue must stay paused for an idle
worker too, and a resume must reach it; the heartbeat is too slow (30 s). The read is one
primary-key lookup per queue of the worker, whether or not anything is controlled.

How the claim obeys (`plan`): a paused queue (or one scaled to 0) is not claimed at all;
a queue scaled to N is claimed on its own, for at most N minus the jobs of it this
worker runs now, and never claimed ahead (`--prefetch`); the other queues are claimed
together as before. Jobs claimed ahead of a queue that is then paused or scaled are
given back unstarted, no attempt counted (`held_back`). Nothing else changes: a running
job finishes, a queued job keeps its place, and nothing is reclaimed because of a pause.

Until the first read has answered, the worker claims nothing: a worker started while a
queue is paused must not start one of its jobs before it learns so. A read that fails
later keeps the last answer (the claim would fail too while the database is away). A
claim never trusts an answer older than `STALE_AFTER` reads' worth (`fresh`): a worker
frozen past a pause (SIGSTOP, a VM paused) reads again before its first claim after.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from heartq import events
from heartq.background import BackgroundLoop, FailureLog
from heartq.event_stream import EventStream
from heartq.queue_controls import QueueControl
from heartq.store.interface import QueueController

JOIN_TIMEOUT = 5.0
"""`stop()` waits at most 5 s for a read under way."""
STALE_AFTER = 3
"""A claim reads the controls itself when the last answer is older than this many
intervals (the loop was held up: the process frozen, the database slow)."""
IN_FLIGHT_WAIT = 30.0
"""The longest a claim waits for a read already on its way before it reads itself."""


@dataclass(frozen=True)
class ClaimGroup:
    """Queues one claim statement takes from, and how many jobs it may take (`limit`
    None: the worker's free slots, counted when the claim has the database in hand)."""

    queues: tuple[str, ...]
    limit: int | None


class QueueControls:
    """The stored controls of one worker's queues, kept current by a background read."""

    def __init__(
        self,
        store: QueueController,
        queues: Sequence[str],
        events_: EventStream,
        worker_id: str,
        *,
        interval: float,
        wake: Callable[[], None],
    ) -> None:
        self._store = store
        self._queues = tuple(queues)
        self._events = events_
        self._worker_id = worker_id
        self._wake = wake
        self._lock = threading.Lock()
        self._answered = threading.Condition(self._lock)  # a read under way ended
        self._known: dict[str, QueueControl] | None = None  # None: not read yet
        self._read_at = float("-inf")  # monotonic time the last read was sent
        self._answered_at = float("-inf")  # ... and answered
        self._in_flight: float | None = None  # when the read under way was sent
        self._interval = interval
        self._failed = FailureLog(
            events_,
            events.MAINTENANCE_FAILED,
            {"worker_id": worker_id, "service": "queue_controls"},
        )
        self._loop = BackgroundLoop(
            "heartq-queue-controls",
            self.refresh,
            wait=interval,
            wait_first=True,
            failed=self._failed,
            join_timeout=JOIN_TIMEOUT,
        )

    def start(self) -> None:
        """Read once now (best effort: a failure leaves the worker claiming nothing
        until a read answers), then once every interval."""
        try:
            self.refresh()
        except Exception as exc:  # noqa: BLE001 - the loop reads again; the claim waits for it
            self._failed.emit(exc)
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()

    @property
    def known(self) -> bool:
        """Whether a read has answered since the worker started."""
        with self._lock:
            return self._known is not None

    def refresh(self) -> None:
        """Read the controls of this worker's queues; tell each change it sees, and wake
        the fetch loop when a queue may be claimed more than before."""
        sent_at = time.monotonic()
        with self._lock:
            self._in_flight = sent_at if self._in_flight is None else self._in_flight
        try:
            found = self._store.queue_controls(self._queues)
        finally:
            with self._answered:
                if self._in_flight == sent_at:
                    self._in_flight = None
                self._answered.notify_all()
        with self._lock:
            if sent_at < self._read_at:
                return  # a later read answered first: its answer stands
            before, self._known = self._known, found
            self._read_at = sent_at
            self._answered_at = time.monotonic()
        if before is None:
            changed = [c for c in found.values() if c.holds_back or c.concurrency is not None]
            self._tell(changed)
            self._wake()
            return
        changed = [
            found.get(queue, QueueControl(queue))
            for queue in self._queues
            if _state(before.get(queue)) != _state(found.get(queue))
        ]
        if changed:
            self._tell(changed)
            self._wake()

    def fresh(self) -> bool:
        """Make sure the answer a claim obeys is recent: read now if the last read is
        older than `STALE_AFTER` intervals. False if that read failed (claim nothing
        this round: the database is away, or slow)."""
        if self._recent(STALE_AFTER * self._interval):
            return True
        try:
            self.refresh()
        except Exception as exc:  # noqa: BLE001 - the fetch loop tries again next round
            self._failed.emit(exc)
            return False
        return True

    def held_back_now(self) -> set[str] | None:
        """The queues held back (paused, or capped at 0) as a read sent within the last
        two intervals found them, reading now if the last read is older (the loop was
        held up): what a claim's jobs are checked against before they start, so a job
        starts only if such a read found its queue open. Two, not one: the loop's own
        reads come an interval plus their round trip apart, and a claim must not read
        again between them. A read that fails leaves the last answer (the claim that asks
        has just reached the database: its jobs are not given back for a blip); None
        only if no read ever answered."""
        if not self._recent(2 * self._interval):
            try:
                self.refresh()
            except Exception as exc:  # noqa: BLE001 - the last answer stands meanwhile
                self._failed.emit(exc)
        with self._lock:
            if self._known is None:
                return None
            known = self._known
        return {queue for queue, control in known.items() if control.holds_back}

    def _recent(self, age: float) -> bool:
        """Whether an answer that came within `age` seconds is in hand, waiting for the
        read under way, if one is, rather than sending another: over a slow or busy link
        a read takes longer than an interval, and a claim that read again beside the
        loop's would double the reads that queue for the worker's two connections (a
        worker kept busy over a link of 400 ms round trips took its own heartbeats for
        lost, 1 run in 3: tests/integration/test_partitions.py). Where a round trip takes
        milliseconds, an answer's age is its read's, as before."""
        with self._answered:
            if self._answered_at >= time.monotonic() - age:
                return True
            if self._in_flight is None:
                return False
            sent_at = self._in_flight
            self._answered.wait_for(lambda: self._in_flight != sent_at, timeout=IN_FLIGHT_WAIT)
            return self._read_at >= sent_at

    def _tell(self, changed: Iterable[QueueControl]) -> None:
        for control in changed:
            self._events.emit(
                events.QUEUE_CONTROL_SEEN,
                logging.INFO,
                worker_id=self._worker_id,
                queue=control.queue,
                paused=control.paused,
                concurrency=control.concurrency,
            )

    def open(self, queues: Sequence[str]) -> bool:
        """Whether the claim may take from `queues` as if nothing were controlled: read,
        and none of them paused or capped (what every claim asks first)."""
        with self._lock:
            known = self._known
        if known is None:
            return False
        return not any(_state(known.get(queue)) != (False, None) for queue in queues)

    def control(self, queue: str) -> QueueControl:
        """`queue`'s control as last read (a pausing one until the first read answers)."""
        with self._lock:
            if self._known is None:
                return QueueControl(queue, paused=True)
            return self._known.get(queue, QueueControl(queue))

    def held_back(self, queue: str) -> bool:
        """Whether jobs of `queue` claimed ahead must be given back: it is paused or
        capped (a capped queue is never claimed ahead)."""
        control = self.control(queue)
        return control.holds_back or control.concurrency is not None

    def plan(self, queues: Sequence[str], running: Iterable[str]) -> list[ClaimGroup]:
        """The claim statements for `queues` now, given the queues of the jobs this worker
        runs (`running`): the queues under no control in one group (first: the worker's
        usual claim), each capped queue alone with its room; paused queues nowhere."""
        with self._lock:
            known = self._known
        if known is None:
            return []
        if not any(q in known for q in queues):
            return [ClaimGroup(tuple(queues), None)]
        free: list[str] = []
        capped: list[ClaimGroup] = []
        counts: Counter[str] | None = None
        for queue in queues:
            control = known.get(queue, QueueControl(queue))
            if control.holds_back:
                continue
            if control.concurrency is None:
                free.append(queue)
                continue
            if counts is None:
                counts = Counter(running)
            room = control.concurrency - counts[queue]
            if room > 0:
                capped.append(ClaimGroup((queue,), room))
        return ([ClaimGroup(tuple(free), None)] if free else []) + capped


def _state(control: QueueControl | None) -> tuple[bool, int | None]:
    """What of a control the claim obeys (who changed it and when are not)."""
    if control is None:
        return (False, None)
    return (control.paused, control.concurrency)
