"""What a worker logs about its own liveness lock.

On PostgreSQL the lock lives on a database session, which can end while the worker lives
on (a server restart, a network reset); the lock's watcher takes it again and reports
both moments here. Events: `liveness_lock_lost` (warning, with the error that ended the
session) and `liveness_lock_restored` (with `after`, seconds without the lock).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from heartq import events
from heartq.model import LivenessChange


def liveness_reporter(worker_id: str) -> Callable[[LivenessChange], None]:
    """The `on_change` a worker gives `Store.liveness_hold`: logs each change."""

    def report(change: LivenessChange) -> None:
        if change.lost:
            events.emit(
                events.LIVENESS_LOCK_LOST, logging.WARNING, worker_id=worker_id, error=change.error
            )
        else:
            events.emit(events.LIVENESS_LOCK_RESTORED, worker_id=worker_id, after=change.after)

    return report
