"""`SQLiteLink`: the SQLite store's link to its database file, `store.link`.

Why an object apart from the store: none of this is an operation on the queue. It is
what a process holds while it runs: a connection per thread (`connection.py`), the
worker's lock file (`liveness.py`) and the schema's migration (`SQLiteDialect.migrate`).
SQLite has no cross-process notifications, so the link listens to nothing
(`supports_notify` False): workers poll (an enqueue in the worker's own process wakes it
at once, `App`'s local wake-ups), a worker's pulse reads its cancels every tick, waiters
re-read.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from heartq.model import LivenessChange
from heartq.store.link import LivenessHandle
from heartq.store.sql.base import deployment_id
from heartq.store.sqlite.connection import ConnectionPool
from heartq.store.sqlite.dialect import SQLiteDialect
from heartq.store.sqlite.liveness import LockFileLiveness


class SQLiteLink:
    """`Link` (`store/link.py`) to a SQLite file."""

    supports_notify = False
    holds_liveness_lock = True  # a lock file, whatever the URL
    claim_commit = "flush"  # each commit syncs its WAL (synchronous=FULL)

    def __init__(
        self, pool: ConnectionPool, dialect: SQLiteDialect, liveness: LockFileLiveness
    ) -> None:
        self.pool = pool
        self.dialect = dialect
        self.liveness = liveness
        self.url = dialect.url
        self.given_url = dialect.url  # a file's URL holds no secret
        self.path: Path = dialect.path

    def reach(self) -> None:
        """A read transaction that runs nothing (opens the connection)."""
        with self.pool.read():
            pass

    def migrate(self) -> int:
        return self.dialect.migrate()

    def deployment_id(self) -> str:
        return deployment_id(self.dialect)

    def resize_pool(self, size: int) -> None:
        """No pool to resize: one connection per thread."""

    def liveness_hold(
        self, worker_id: str, on_change: Callable[[LivenessChange], None] | None = None
    ) -> LivenessHandle:
        return self.liveness.hold(worker_id, on_change)

    def listen(
        self, on_wake: Callable[[], None], on_due: Callable[[float], None] | None = None
    ) -> None:
        """None: no cross-process notifications; workers poll."""
        return None

    def listen_cancels(self, worker_id: str, on_cancel: Callable[[], None]) -> None:
        """None: a worker's pulse reads its cancels every tick."""
        return None

    def listen_ends(self, on_end: Callable[[str | None], None]) -> None:
        """None: waiters re-read."""
        return None

    def close(self) -> None:
        self.pool.close()

    def trace_statements(self, callback: Any) -> None:
        """Call `callback(sql)` for every statement this store runs (tests count them)."""
        self.pool.trace.append(callback)
        self.pool.enable_trace()
