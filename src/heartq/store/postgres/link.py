"""`PostgresLink`: the PostgreSQL store's link to its database, `store.link`.

Why an object apart from the store: none of this is an operation on the queue. It is
what a process holds while it runs: the pool (`connection.py`), the one lasting session
(`session.py`) on which the worker's liveness lock (`liveness.py`) and every LISTEN
(`notifications.py`) live, and the schema's migration (`PostgresDialect.migrate`). A
worker reaches the database, migrates, takes its lock and listens through it once at
startup and closes it at the end; the queue operations never touch it.

Behind a transaction-mode pooler without a direct URL there is no lasting session: the
link holds no lock (`NoLock`, and `holds_liveness_lock` False, recorded in each worker's
row so no probe tries it) and listens to nothing (`supports_notify` False: workers poll
for jobs, their pulse reads cancels, `App.result` re-reads).
"""

from __future__ import annotations

from collections.abc import Callable

from heartq.model import LivenessChange
from heartq.store.link import LivenessHandle
from heartq.store.postgres import claim_commit
from heartq.store.postgres.connection import ConnectionPool
from heartq.store.postgres.dialect import PostgresDialect
from heartq.store.postgres.liveness import AdvisoryLiveness
from heartq.store.postgres.notifications import NotifyListeners
from heartq.store.postgres.session import LastingSession
from heartq.store.sql.base import deployment_id


class PostgresLink:
    """`Link` (`store/link.py`) to a PostgreSQL schema."""

    def __init__(
        self,
        pool: ConnectionPool,
        sessions: LastingSession,
        dialect: PostgresDialect,
        liveness: AdvisoryLiveness,
        listeners: NotifyListeners | None,
    ) -> None:
        self.pool = pool
        self.sessions = sessions
        self.dialect = dialect
        self.liveness = liveness
        self.listeners = listeners
        self.url = dialect.url
        self.given_url = pool.url
        self.schema = pool.schema
        self.supports_notify = listeners is not None
        self.holds_liveness_lock = pool.sessions
        lazy = pool.claim_async_after is not None
        self.claim_commit = claim_commit.ASYNC if lazy else claim_commit.FLUSH

    def reach(self) -> None:
        """One connection attempt of its own: its failure is known at once (the pool
        would retry in the background until its timeout)."""
        self.pool.reach()

    def migrate(self) -> int:
        return self.dialect.migrate()

    def deployment_id(self) -> str:
        return deployment_id(self.dialect)

    def resize_pool(self, size: int) -> None:
        self.pool.resize(size)

    def liveness_hold(
        self, worker_id: str, on_change: Callable[[LivenessChange], None] | None = None
    ) -> LivenessHandle:
        return self.liveness.hold(worker_id, on_change)

    def listen(
        self, on_wake: Callable[[], None], on_due: Callable[[float], None] | None = None
    ) -> LivenessHandle | None:
        return None if self.listeners is None else self.listeners.listen(on_wake, on_due)

    def listen_cancels(
        self, worker_id: str, on_cancel: Callable[[], None]
    ) -> LivenessHandle | None:
        if self.listeners is None:
            return None
        return self.listeners.listen_cancels(worker_id, on_cancel)

    def listen_ends(self, on_end: Callable[[str | None], None]) -> LivenessHandle | None:
        return None if self.listeners is None else self.listeners.listen_ends(on_end)

    def close(self) -> None:
        self.sessions.close()
        self.pool.close()

    @property
    def liveness_restart_quiet(self) -> float:
        """Seconds after a server's start, or this process's session's reopening, during
        which no liveness probe runs (`LIVENESS_RESTART_QUIET`; tests set it)."""
        return self.liveness.restart_quiet

    @liveness_restart_quiet.setter
    def liveness_restart_quiet(self, seconds: float) -> None:
        self.liveness.restart_quiet = seconds
