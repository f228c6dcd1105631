"""`PostgresStore`: the SQL store built over PostgreSQL's objects.

Why a class of its own that overrides nothing: `open_store` and the tests name the
backend by its class, and its migrations are found beside it (`SqlStore.migrations`);
everything PostgreSQL does its own way is in the objects this wires together around one
connection pool: the dialect (`dialect.py`), the store's one lasting session
(`session.py`), shared by the liveness locks (`liveness.py`), the LISTENs
(`notifications.py`) and the heartbeat.

Behind a connection pooler in transaction mode (`pooler.py`) there is no lasting session
unless a direct URL gives one: then workers hold no liveness lock (`NoLock`, recorded in
their row so no probe tries it), nobody LISTENs (no `Listeners`, `supports_notify` False:
workers poll for jobs, their pulse reads cancels, `App.result` re-reads), and the
NOTIFYs enqueues send still wake whoever listens on a direct session.
"""

from __future__ import annotations

from heartq.store.postgres.connection import ConnectionPool
from heartq.store.postgres.dialect import PostgresDialect
from heartq.store.postgres.liveness import AdvisoryLiveness
from heartq.store.postgres.notifications import Channels, NotifyListeners
from heartq.store.postgres.session import LastingSession
from heartq.store.redaction import redact
from heartq.store.sql.store import SqlStore


class PostgresStore(SqlStore):
    """`Store` on PostgreSQL. Thread-safe: every call takes a pooled connection."""

    def __init__(self, url: str, pool_size: int | None = None) -> None:
        self.pool = ConnectionPool(url, pool_size)
        self.schema = self.pool.schema
        sessions = LastingSession(self.pool.connect)
        channels = Channels.of(self.schema)
        dialect = PostgresDialect(
            self.pool, redact(url), sessions, channels, lambda: self.migrations()
        )
        self.advisory = AdvisoryLiveness(dialect, sessions, self.pool.sessions)
        listeners = NotifyListeners(sessions, channels) if self.pool.sessions else None
        super().__init__(
            dialect, self.advisory, listeners, holds_liveness_lock=self.pool.sessions
        )

    @property
    def liveness_restart_quiet(self) -> float:
        """Seconds after a server's start, or this process's session's reopening, during
        which no probe runs (`LIVENESS_RESTART_QUIET`; tests set it)."""
        return self.advisory.restart_quiet

    @liveness_restart_quiet.setter
    def liveness_restart_quiet(self, seconds: float) -> None:
        self.advisory.restart_quiet = seconds
