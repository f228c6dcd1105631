"""What SQLite's errors mean for heartq, in one clear line each.

A full disk, a read-only file, a file deleted under the worker and a lock held too long
are the database's bad days, not bugs: each becomes `StoreUnavailable` (or `StoreBusy`)
with a `reason`, so every caller that retries a blip (the worker's claim, heartbeat and
completer, a startup wait) retries these too, and the worker logs one line per change of
state rather than one per attempt. Anything else SQLite says is passed through with the
file's name, except integrity errors, whose meaning only the caller knows.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from heartq.errors import StoreBusy, StoreUnavailable

DISK_FULL = "disk_full"
READ_ONLY = "read_only"
FILE_GONE = "file_gone"


def free_bytes(path: Path) -> int | None:
    """Bytes an unprivileged writer may still use on the filesystem of `path`'s directory
    (None if it cannot be told)."""
    try:
        stats = os.statvfs(path.absolute().parent)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize


def _size(count: int | None) -> str:
    if count is None:
        return "unknown"
    if count < 1024 * 1024:
        return f"{count / 1024:.0f} KiB"
    return f"{count / (1024 * 1024):.1f} MiB"


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.Error) and (
        getattr(exc, "sqlite_errorname", "") == "SQLITE_FULL" or "disk is full" in str(exc)
    )


def disk_full(path: Path) -> StoreUnavailable:
    return StoreUnavailable(
        f"SQLite database {path}: the disk is full ({_size(free_bytes(path))} free); "
        "nothing can be written until space is freed (a worker waits, and resumes by "
        "itself)",
        DISK_FULL,
    )


def read_only(path: Path) -> StoreUnavailable:
    return StoreUnavailable(
        f"SQLite database {path} is read-only: nothing can be written until the file (and "
        "its directory) is writable again (a worker waits, and resumes by itself)",
        READ_ONLY,
    )


def file_gone(path: Path, what: str) -> StoreUnavailable:
    return StoreUnavailable(
        f"SQLite database {path} {what} while heartq had it open; nothing more is written "
        "until the file is back (see docs/RELIABILITY.md: restore it from the worker's open "
        "file, /proc/<pid>/fd)",
        FILE_GONE,
    )


def translate(exc: sqlite3.Error, path: Path) -> Exception:
    """The exception heartq raises for SQLite's `exc` on the database at `path`."""
    text = str(exc)
    lowered = text.lower()
    if is_disk_full(exc):
        return disk_full(path)
    if "locked" in lowered or "busy" in lowered:
        return StoreBusy(f"SQLite database {path} is locked by another process: {text}")
    if "readonly" in lowered or "read-only" in lowered:
        return read_only(path)
    if "unable to open" in lowered and not path.exists():
        return file_gone(path, "does not exist (deleted?)")
    if "unable to open" in lowered or "disk i/o" in lowered or "not a database" in lowered:
        return StoreUnavailable(f"cannot use SQLite database {path}: {text}")
    if isinstance(exc, sqlite3.IntegrityError):
        return exc  # the caller knows what a constraint means there
    if isinstance(exc, sqlite3.OperationalError | sqlite3.DatabaseError):
        return StoreUnavailable(f"SQLite database {path}: {text}")
    return exc
