"""`PostgresStore`: the SQL store built over PostgreSQL's objects.

Why a class of its own that overrides nothing: `open_store` and the tests name the
backend by its class; everything PostgreSQL does its own way is in the objects this
wires together around one connection pool: the dialect (`dialect.py`), the liveness
locks (`liveness.py`) and the link (`link.py`: the pool, the store's one lasting
session (`session.py`), shared by the liveness locks, the LISTENs (`notifications.py`)
and the heartbeat). Behind a connection pooler in transaction mode (`pooler.py`) there
is no lasting session unless a direct URL gives one: no LISTENs then, and no lock.
"""

from __future__ import annotations

from heartq.store.postgres.connection import ConnectionPool
from heartq.store.postgres.dialect import PostgresDialect
from heartq.store.postgres.link import PostgresLink
from heartq.store.postgres.liveness import AdvisoryLiveness
from heartq.store.postgres.notifications import Channels, NotifyListeners
from heartq.store.postgres.session import LastingSession
from heartq.store.redaction import redact
from heartq.store.sql.store import SqlStore


class PostgresStore(SqlStore):
    """`Store` on PostgreSQL. Thread-safe: every call takes a pooled connection."""

    link: PostgresLink
    dialect: PostgresDialect

    def __init__(self, url: str, pool_size: int | None = None) -> None:
        pool = ConnectionPool(url, pool_size)
        sessions = LastingSession(pool.connect)
        channels = Channels.of(pool.schema)
        dialect = PostgresDialect(pool, redact(url), sessions, channels)
        liveness = AdvisoryLiveness(dialect, sessions, pool.sessions)
        listeners = NotifyListeners(sessions, channels) if pool.sessions else None
        link = PostgresLink(pool, sessions, dialect, liveness, listeners)
        super().__init__(dialect, liveness, link)
