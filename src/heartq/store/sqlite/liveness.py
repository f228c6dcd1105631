"""SQLite's liveness locks: a lock file per worker, held by its process, judged free by any
process on the same host; and how the store uses them.

A live worker holds an exclusive `flock` on `<db>.workers/<worker_id>.lock` for its whole
life. The kernel drops the lock the instant the process dies (SIGKILL, OOM kill,
segfault), so any process on the machine can tell a gone worker from a live one with one
non-blocking lock attempt. `flock` (not `fcntl`/`lockf`) because its locks belong to the
open file, so a probe from the same process as a live worker still sees the lock as taken.

The lock only speeds detection up. Leases stay the truth: a worker that is wrongly
suspected is harmless, because fencing refuses its writes.

Why an object of its own and not store hooks: a lock file is not SQL. The SQL store asks
it, through `Liveness` (`store/sql/base.py`), which workers' locks are free (`gone`: the
probe reclaims their jobs in the transaction it opens), whether a namesake's lock is
free, and to clean up after the workers it reclaimed. A free `flock` is a gone process
(the kernel dropped it), so there is no grace.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from heartq.model import LivenessChange
from heartq.store.link import LivenessHandle
from heartq.store.sql.base import Dialect, FoundGone
from heartq.store.sqlite import queries as q


class LockFileLiveness:
    """`Liveness` by lock files beside the database file at `path`."""

    def __init__(self, dialect: Dialect, path: Path) -> None:
        self.d = dialect
        self.path = path
        self.grace = 0.0  # a free flock is a gone process: the kernel dropped it

    def hold(
        self, worker_id: str, on_change: Callable[[LivenessChange], None] | None = None
    ) -> LivenessHandle:
        """A lock file the kernel frees when the process dies; it is never lost while the
        process lives, so `on_change` is never called."""
        return FileLivenessLock(self.path, worker_id)

    @contextlib.contextmanager
    def gone(self, now: float | None = None) -> Iterator[FoundGone | None]:
        """This host's active workers whose lock file is free, in a write transaction
        (None, and no transaction, when there is none)."""
        gone = [w for w in self._here() if is_gone(self.path, w)]
        if not gone:
            yield None
            return
        with self.d.write() as conn:
            yield FoundGone(conn, self.d.clock(conn, now), gone)

    def suspects(self) -> dict[str, float]:
        """None: a free lock file is believed at once."""
        return {}

    def free(self, worker_ids: Sequence[str]) -> list[str]:
        """This host's active workers among `worker_ids` whose lock file is free (a lock
        file is only judged on the host whose kernel holds it)."""
        if not worker_ids:
            return []
        here = set(self._here())
        return [w for w in worker_ids if w in here and is_gone(self.path, w)]

    def lock_free(self, namesake: Mapping[str, Any]) -> bool:
        """No lock file: nothing says it is alive."""
        return is_gone(self.path, namesake["id"]) is not False

    def note_locks(
        self, conn: Any, clock: float | None, free: Sequence[str], held: Sequence[str]
    ) -> None:
        """Nothing to note: a free lock file is a gone process, with no grace to wait."""

    def forget(self, worker_ids: Sequence[str]) -> None:
        """Remove the lock files of reclaimed workers whose lock is free."""
        for worker_id in worker_ids:
            if is_gone(self.path, worker_id):
                forget_lock_file(self.path, worker_id)

    def _here(self) -> list[str]:
        """This host's active workers."""
        self.d.ensure_schema()
        with self.d.read() as conn:
            params = {"hostname": socket.gethostname()}
            return [r["id"] for r in conn.execute(q.ACTIVE_WORKERS_ON_HOST, params)]


# -- the lock files ----------------------------------------------------------------------
def lock_dir(db_path: Path) -> Path:
    return db_path.absolute().with_name(db_path.name + ".workers")


def _lock_path(db_path: Path, worker_id: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in worker_id)
    return lock_dir(db_path) / f"{safe}.lock"


class FileLivenessLock:
    """Held by a live worker; `close()` on a clean stop."""

    def __init__(self, db_path: Path, worker_id: str) -> None:
        self.path = _lock_path(db_path, worker_id)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def close(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()
        os.close(self._fd)
        self._fd = None


def is_gone(db_path: Path, worker_id: str) -> bool | None:
    """True if the worker's lock can be taken (its process is gone), False if held,
    None if there is no lock file to judge by."""
    path = _lock_path(db_path, worker_id)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                return False
            raise
        return True
    finally:
        os.close(fd)


def forget_lock_file(db_path: Path, worker_id: str) -> None:
    """Remove a gone worker's lock file once its jobs are reclaimed."""
    with contextlib.suppress(OSError):
        _lock_path(db_path, worker_id).unlink()
