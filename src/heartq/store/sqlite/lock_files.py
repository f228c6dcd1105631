"""Liveness locks for SQLite: an `flock` on a per-worker file beside the database.

A live worker holds an exclusive `flock` on `<db>.workers/<worker_id>.lock` for its whole
life. The kernel drops the lock the instant the process dies (SIGKILL, OOM kill,
segfault), so any process on the machine can tell a dead worker from a live one with one
non-blocking lock attempt. `flock` (not `fcntl`/`lockf`) because its locks belong to the
open file, so a probe from the same process as a live worker still sees the lock as taken.

The lock only speeds detection up. Leases stay the truth: a worker that is wrongly
suspected is harmless, because fencing refuses its writes.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path


def lock_dir(db_path: Path) -> Path:
    return db_path.absolute().with_name(db_path.name + ".workers")


def _lock_path(db_path: Path, worker_id: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in worker_id)
    return lock_dir(db_path) / f"{safe}.lock"


class FileLivenessLock:
    """Held by a live worker; `release()` on a clean stop."""

    def __init__(self, db_path: Path, worker_id: str) -> None:
        self.path = _lock_path(db_path, worker_id)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()
        os.close(self._fd)
        self._fd = None


def is_dead(db_path: Path, worker_id: str) -> bool | None:
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


def forget(db_path: Path, worker_id: str) -> None:
    """Remove a dead worker's lock file once its jobs are reclaimed."""
    with contextlib.suppress(OSError):
        _lock_path(db_path, worker_id).unlink()
