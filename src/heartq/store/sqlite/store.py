"""`SQLiteStore`: the SQL store built over SQLite's objects.

Why a class of its own that overrides nothing: `open_store` and the tests name the
backend by its class, and its migrations are found beside it (`SqlStore.migrations`);
everything SQLite does its own way is in the objects this wires together around one
database file: the dialect (`dialect.py`) and the liveness lock files (`liveness.py`).
SQLite has no cross-process notifications, so the store has no `Listeners`: workers
poll (an enqueue in the worker's own process wakes it at once, `App`'s local wake-ups),
a worker's pulse reads its cancels every tick, waiters re-read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from heartq.store.sql.store import SqlStore
from heartq.store.sqlite.connection import (
    DEFAULT_BUSY_TIMEOUT,
    ConnectionPool,
    options_from_url,
    path_from_url,
)
from heartq.store.sqlite.dialect import SQLiteDialect
from heartq.store.sqlite.liveness import LockFileLiveness


class SQLiteStore(SqlStore):
    """`Store` on a SQLite file. Thread-safe: each thread uses its own connection."""

    def __init__(self, url: str, *, busy_timeout: float | None = None) -> None:
        self.path: Path = path_from_url(url)
        options = options_from_url(url)
        timeout = busy_timeout if busy_timeout is not None else options.busy_timeout
        self.pool = ConnectionPool(
            self.path,
            DEFAULT_BUSY_TIMEOUT if timeout is None else timeout,
            options.synchronous,
        )
        dialect = SQLiteDialect(self.pool, url, self.path, lambda: self.migrations())
        super().__init__(dialect, LockFileLiveness(dialect, self.path), None)

    def trace_statements(self, callback: Any) -> None:
        """Call `callback(sql)` for every statement this store runs (tests count them)."""
        self.pool.trace.append(callback)
        self.pool.enable_trace()
