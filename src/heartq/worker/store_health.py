"""One line per change of the database's state, not one per failed attempt.

While the database refuses writes (a full disk, a read-only or deleted SQLite file, a
server down), every part of a worker fails at its own pace: the claim every second, the
heartbeat every tick, the completer on each retry, maintenance each pass. Logged at
WARNING each, that buries the one thing an operator needs in noise. So the parts report
here: the first failure, and each change of reason (`StoreUnavailable.reason`), logs
`store_unavailable` at ERROR; the first success after that logs `store_recovered`. Each
part still logs its own event (`claim_failed`, `heartbeat_failed`, ...), at the level
`failed` returns: DEBUG for a known database state, WARNING for anything else.
"""

from __future__ import annotations

import logging
import threading
import time

from heartq import events
from heartq.errors import StoreUnavailable
from heartq.event_stream import EventStream


class StoreHealth:
    """What one worker knows of its database's state, each change told to its `events`.
    Thread-safe."""

    def __init__(self, worker_id: str, events: EventStream) -> None:
        self._worker_id = worker_id
        self.events = events
        self._lock = threading.Lock()
        self._reason: str | None = None
        self._since = 0.0

    @property
    def down(self) -> bool:
        return self._reason is not None

    @staticmethod
    def level_of(exc: BaseException) -> int:
        """The level for a part's own event of failing with `exc`: DEBUG for a known
        state of the database (`store_unavailable` says it), WARNING for anything else."""
        return logging.DEBUG if isinstance(exc, StoreUnavailable) else logging.WARNING

    def failed(self, exc: BaseException, part: str) -> int:
        """Record a failure of `part`; returns the level for the part's own event."""
        if not isinstance(exc, StoreUnavailable):
            return self.level_of(exc)
        with self._lock:
            changed = exc.reason != self._reason
            if self._reason is None:
                self._since = time.monotonic()
            self._reason = exc.reason
        if changed:
            self.events.emit(
                events.STORE_UNAVAILABLE,
                logging.ERROR,
                worker_id=self._worker_id,
                reason=exc.reason,
                error=str(exc),
                part=part,
            )
        return logging.DEBUG

    def succeeded(self, part: str, began: float) -> None:
        """Record a write that landed (cheap when nothing was wrong). `began` is when it
        started (monotonic): a write already under way when the database turned bad (it
        passed its checks just before a file was deleted, say) proves no recovery, and
        counting it would log the same state twice."""
        if self._reason is None:
            return
        with self._lock:
            if began < self._since:
                return
            reason, self._reason = self._reason, None
            down_for = time.monotonic() - self._since
        if reason is not None:
            self.events.emit(
                events.STORE_RECOVERED,
                worker_id=self._worker_id,
                reason=reason,
                down_for=round(down_for, 3),
                part=part,
            )
