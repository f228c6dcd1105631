"""SQLite's liveness locks, as the store uses them: a lock file per worker (`lock_files.py`),
held by its process, judged free by any process on the same host.

Why an object of its own and not store hooks: a lock file is not SQL. The SQL store asks
it, through `Liveness` (`store/sql/base.py`), whether a namesake's lock is free and to
clean up after the workers it reclaimed, and hands it the reclaimer its probe reclaims
with. A free `flock` is a dead process (the kernel dropped it), so there is no grace.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from heartq.model import LivenessChange, StaleWorker
from heartq.store.interface import LivenessHandle
from heartq.store.sql.base import DeadReclaimer, Dialect
from heartq.store.sqlite import lock_files
from heartq.store.sqlite import queries as q


class LockFileLiveness:
    """`Liveness` by lock files beside the database file at `path`."""

    def __init__(self, dialect: Dialect, path: Path) -> None:
        self.d = dialect
        self.path = path
        self.grace = 0.0  # a free flock is a dead process: the kernel dropped it

    def hold(
        self, worker_id: str, on_change: Callable[[LivenessChange], None] | None = None
    ) -> LivenessHandle:
        """A lock file the kernel frees when the process dies; it is never lost while the
        process lives, so `on_change` is never called."""
        return lock_files.FileLivenessLock(self.path, worker_id)

    def probe(
        self,
        reclaimer: DeadReclaimer,
        detected_by: str,
        now: float | None = None,
        observer: str | None = None,
    ) -> list[StaleWorker]:
        """Reclaim the jobs of this host's active workers whose lock file is free."""
        dead = [w for w in self._here() if lock_files.is_dead(self.path, w)]
        if not dead:
            return []
        with self.d.write() as conn:
            clock = self.d.clock(conn, now)
            found = reclaimer.reclaim_dead(conn, clock, dead, detected_by, observer)
        self.forget(dead)
        return found

    def suspects(self) -> dict[str, float]:
        """None: a free lock file is believed at once."""
        return {}

    def free(self, worker_ids: Sequence[str]) -> list[str]:
        """This host's active workers among `worker_ids` whose lock file is free (a lock
        file is only judged on the host whose kernel holds it)."""
        if not worker_ids:
            return []
        here = set(self._here())
        return [w for w in worker_ids if w in here and lock_files.is_dead(self.path, w)]

    def lock_free(self, namesake: Mapping[str, Any]) -> bool:
        """No lock file: nothing says it is alive."""
        return lock_files.is_dead(self.path, namesake["id"]) is not False

    def note_locks(
        self, conn: Any, clock: float | None, free: Sequence[str], held: Sequence[str]
    ) -> None:
        """Nothing to note: a free lock file is a dead process, with no grace to wait."""

    def forget(self, worker_ids: Sequence[str]) -> None:
        """Remove the lock files of reclaimed workers whose lock is free."""
        for worker_id in worker_ids:
            if lock_files.is_dead(self.path, worker_id):
                lock_files.forget(self.path, worker_id)

    def _here(self) -> list[str]:
        """This host's active workers."""
        self.d.ensure_schema()
        with self.d.read() as conn:
            params = {"hostname": socket.gethostname()}
            return [r["id"] for r in conn.execute(q.ACTIVE_WORKERS_ON_HOST, params)]
