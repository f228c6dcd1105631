"""What a worker logs about its own liveness lock.

On PostgreSQL the lock lives on a database session, which can end while the worker lives
on (a server restart, a network reset); the lock's watcher takes it again and reports
both moments here. Events: `liveness_lock_lost` (warning, with the error that ended the
session) and `liveness_lock_restored` (with `after`, seconds without the lock).

A session that ended may have ended with its server, and a server that comes back may
have lost its last commits (a standby promoted after asynchronous replication): a
finish the worker saw acknowledged may be gone, its job `running` again under this
worker, which no longer holds it and whose lease would cover it for as long as it
lives. So a restored lock also asks for a sweep (`restored`): the next heartbeat
detaches every running attempt of this worker it does not name, and the lease reclaimer takes
those once their leases run out.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from heartq.event_stream import EventStream
from heartq.events import LIVENESS_LOCK_LOST, LIVENESS_LOCK_RESTORED
from heartq.model import LivenessChange


def liveness_reporter(
    worker_id: str, restored: Callable[[], None], events: EventStream
) -> Callable[[LivenessChange], None]:
    """The `on_change` a worker gives `Link.liveness_hold`: tells each change to the
    worker's `events`, and calls `restored` when the lock is back (the worker's ledger
    asks for a sweep)."""

    def report(change: LivenessChange) -> None:
        if change.lost:
            events.emit(
                LIVENESS_LOCK_LOST, logging.WARNING, worker_id=worker_id, error=change.error
            )
        else:
            restored()
            events.emit(LIVENESS_LOCK_RESTORED, worker_id=worker_id, after=change.after)

    return report
