"""The caller's own `sqlite3.Connection`, for an enqueue inside the caller's transaction.

The job is written by the caller's connection, in the caller's transaction: it exists if
and only if that transaction commits. The connection must be on the queue's own file
(SQLite has one transaction per connection; a job written elsewhere would be in another
database), and must have a transaction to join: in autocommit mode (`isolation_level =
None`) a `BEGIN` must have been run first, or each statement would commit on its own.
With Python's default (legacy) transaction handling, heartq's INSERT opens the
transaction if none is open, and the caller's `commit()` ends it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from heartq.errors import ConfigError


@contextlib.contextmanager
def borrowed(connection: Any, queue_path: Path) -> Iterator[sqlite3.Cursor]:
    """A cursor of `connection` whose rows read by column name; `ConfigError` (nothing
    written) for a connection heartq cannot enqueue through."""
    if not isinstance(connection, sqlite3.Connection):
        raise ConfigError(
            "a SQLite queue enqueues in a transaction of a sqlite3.Connection on its file, "
            f"not {type(connection).__name__}"
        )
    main = _main_file(connection)
    if not main or not _same_file(main, queue_path):
        raise ConfigError(
            f"the connection is on {main or 'an in-memory database'}, the queue on "
            f"{queue_path}: open the connection on the queue's file"
        )
    if connection.isolation_level is None and not connection.in_transaction:
        raise ConfigError(
            "the connection is in autocommit mode with no open transaction: run BEGIN "
            "first, or the job would be committed on its own"
        )
    cursor = connection.cursor()
    cursor.row_factory = sqlite3.Row
    try:
        yield cursor
    finally:
        cursor.close()


def _main_file(connection: sqlite3.Connection) -> str:
    cursor = connection.cursor()
    cursor.row_factory = None  # whatever the caller's factory, read plain tuples
    try:
        rows = cursor.execute("PRAGMA database_list").fetchall()
    finally:
        cursor.close()
    return next((str(row[2]) for row in rows if row[1] == "main"), "")


def _same_file(path: str, queue_path: Path) -> bool:
    try:
        return os.path.samefile(path, queue_path)
    except OSError:
        return False
