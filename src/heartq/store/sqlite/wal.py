"""Keeping the write-ahead log from filling a nearly full disk, and emptying it after.

SQLite checkpoints the WAL into the database file on its own only once the WAL holds
1,000 pages (4 MiB at 4 KiB pages), and even then leaves the file at its largest size.
On a disk with less room than that the WAL grows until a write fails with "database or
disk is full", and nothing ever empties it: the database file stays a few KiB, every
committed write lives in the WAL, and freeing space buys only a few more writes before
the WAL fills the disk again (seen: a 4 KiB `q.db` beside a 2 MiB `q.db-wal`).

So a process's pool keeps one `WalGuard`:

- after a write failed for lack of space, each later write first tries a truncating
  checkpoint (`PRAGMA wal_checkpoint(TRUNCATE)`: the WAL is copied into the database and
  cut to zero bytes), until one completes;
- while the disk has less than `LOW_SPACE_BYTES` free (looked at once a second at most),
  every committed write is followed by a truncating checkpoint, so the WAL never holds
  more than one transaction. It costs a second fsync per write, on a disk about to fill.

A checkpoint waits for other processes' readers for at most `CHECKPOINT_BUSY_MS`; one
that cannot complete is tried again with the next write. Errors of a checkpoint are
swallowed: the next write reports the disk's state itself.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from heartq.store.sqlite.faults import free_bytes, is_disk_full

LOW_SPACE_BYTES = 64 * 1024 * 1024
"""Below 64 MiB free, the WAL is truncated after every write (16 times the 4 MiB it may
otherwise reach before SQLite checkpoints it)."""
SPACE_CHECK_INTERVAL = 1.0
"""Free space is looked at once a second at most (one `statvfs`)."""
CHECKPOINT_BUSY_MS = 100
"""A checkpoint waits at most 100 ms for other processes' readers and writers."""


class WalGuard:
    """The WAL policy of one process's connections to one file. Called by the pool inside
    its own write lock, so it needs none of its own."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.low_space = False
        """The disk is nearly full: truncate the WAL after every write."""
        self.pending = False
        """A write failed for lack of space and no checkpoint has completed since."""
        self._checked_at = float("-inf")
        self.checkpoints = 0
        """Truncating checkpoints that completed (tests and figures read it)."""

    def before_write(self, conn: sqlite3.Connection) -> None:
        if self.pending:
            self.checkpoint(conn)

    def after_commit(self, conn: sqlite3.Connection) -> None:
        self._look_at_space()
        if self.low_space or self.pending:
            self.checkpoint(conn)

    def write_failed(self, exc: BaseException) -> None:
        if is_disk_full(exc):
            self.pending = self.low_space = True
            self._checked_at = time.monotonic()

    def checkpoint(self, conn: sqlite3.Connection) -> bool:
        """Copy the WAL into the database and cut it to zero bytes. True if it did."""
        try:
            was = int(conn.execute("PRAGMA busy_timeout").fetchone()[0])  # a write's is 0
            conn.execute(f"PRAGMA busy_timeout = {CHECKPOINT_BUSY_MS}")
            try:
                busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            finally:
                conn.execute(f"PRAGMA busy_timeout = {was}")
        except sqlite3.Error:
            return False
        if busy:
            return False
        self.pending = False
        self.checkpoints += 1
        return True

    def _look_at_space(self) -> None:
        now = time.monotonic()
        if now - self._checked_at < SPACE_CHECK_INTERVAL:
            return
        self._checked_at = now
        free = free_bytes(self.path)
        self.low_space = free is not None and free < LOW_SPACE_BYTES
