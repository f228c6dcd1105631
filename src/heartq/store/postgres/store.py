"""The PostgreSQL dialect: the same protocol for workers on many machines.

Claims take rows with `FOR UPDATE SKIP LOCKED`, so workers never wait on each other's
claims; claim, heartbeat and finish are each one statement (with their execution audit
in the same statement). Reclaimers lock the rows they reclaim, skip the ones another
reclaimer holds, and fence their update on `(id, execution_id, status)`: each job is
reclaimed exactly once. The operations are written once in `store/sql.py`; this module
holds what PostgreSQL does its own way: pooled connections (`connection.py`), statements
that read the transaction's clock, lists bound as arrays, `NOTIFY` on enqueue (heard by
`listener.py`), and liveness locks that are session advisory locks (`liveness.py`). SQL:
`queries.py`; schema: `migrations/`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import psycopg

from heartq.store import redact
from heartq.store.interface import LivenessChange, LivenessHandle, StaleWorker
from heartq.store.postgres import queries as q
from heartq.store.postgres.connection import Pool
from heartq.store.postgres.listener import Listener
from heartq.store.postgres.liveness import (
    LIVENESS_GRACE,
    LIVENESS_RESTART_QUIET,
    AdvisoryLivenessLock,
    GraceTracker,
)
from heartq.store.sql import SqlStore

Conn = psycopg.Connection[Any]


class PostgresStore(SqlStore):
    """`Store` on PostgreSQL. Thread-safe: every call takes a pooled connection."""

    q = q
    supports_notify = True

    def __init__(self, url: str) -> None:
        self.pool = Pool(url)
        self.url = redact(url)
        self.schema = self.pool.schema
        self.channel = f"heartq_{self.schema}"
        self._migrated = False
        self.liveness_restart_quiet = LIVENESS_RESTART_QUIET
        self._grace = GraceTracker(LIVENESS_GRACE)

    @property
    def liveness_grace(self) -> float:
        return self._grace.grace

    @liveness_grace.setter
    def liveness_grace(self, seconds: float) -> None:
        self._grace.grace = seconds

    # -- lifecycle -----------------------------------------------------------------------
    def migrate(self) -> int:
        """Bring the schema up to date; returns its version. Reads first: an up-to-date
        schema is left alone, without a lock or a write, so a read-only role can use it."""
        scripts = self.migrations()
        latest = scripts[-1][0] if scripts else 0
        current = self._applied_version()
        if current is None or current < latest:
            current = self._apply(scripts)
        self._migrated = True
        return current

    def _applied_version(self) -> int | None:
        """The schema's version, or None if it has no `schema_migrations` table yet."""
        with self.pool.transaction() as conn:
            row = conn.execute(q.MIGRATIONS_PRESENT, {"schema": self.schema}).fetchone()
            if not row or not row["present"]:
                return None
            table = psycopg.sql.Identifier(self.schema, "schema_migrations")
            row = conn.execute(
                psycopg.sql.SQL("SELECT coalesce(max(version), 0) AS v FROM {}").format(table)
            ).fetchone()
        return int(row["v"]) if row else 0

    def _apply(self, scripts: list[tuple[int, str]]) -> int:
        schema = psycopg.sql.Identifier(self.schema)
        with self.pool.transaction() as conn:
            conn.execute(q.MIGRATION_START)
            conn.execute(psycopg.sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema))
            conn.execute(q.MIGRATIONS_TABLE)
            row = conn.execute(q.SCHEMA_VERSION).fetchone()
            current = int(row["v"]) if row else 0
            for version, script in scripts:
                if version > current:
                    conn.execute(script.encode())
                    conn.execute(q.RECORD_MIGRATION, {"version": version})
                    current = version
        return current

    def close(self) -> None:
        self.pool.close()

    # -- the dialect's hooks (see store/sql.py) ------------------------------------------
    def _write(self) -> contextlib.AbstractContextManager[Any]:
        return self.pool.transaction()

    def _read(self) -> contextlib.AbstractContextManager[Any]:
        return self.pool.transaction()

    def _now(self, conn: Any, now: float | None) -> float:
        row = conn.execute(q.NOW, {"now": now}).fetchone()
        assert row is not None
        return float(row["now"])

    def _clock(self, conn: Any, now: float | None) -> float | None:
        """`now` as given: the statements read `now()` themselves when it is None."""
        return now

    def _array(self, values: Sequence[str]) -> list[str]:
        return list(values)

    def _is_duplicate(self, exc: Exception) -> bool:
        return isinstance(exc, psycopg.errors.UniqueViolation)

    def _wake(self, conn: Any, queues: Iterable[str]) -> None:
        for queue in sorted(set(queues)):
            conn.execute(q.NOTIFY, {"channel": self.channel, "queue": queue})

    # -- liveness locks and wake-ups -----------------------------------------------------
    def liveness_hold(
        self, worker_id: str, on_change: Callable[[LivenessChange], None] | None = None
    ) -> LivenessHandle:
        return AdvisoryLivenessLock(self.pool.connect, worker_id, on_change)

    def liveness_probe(self, detected_by: str, now: float | None = None) -> list[StaleWorker]:
        """Reclaim the jobs of active workers whose liveness lock stayed free on consecutive
        probes spanning `liveness_grace` (`LIVENESS_GRACE`) of database time (`now` if
        given); a worker found holding its lock again is forgotten.

        Why not at the first free lock: a free lock means the lock's session is gone, and a
        dropped session is not a dead process. A server restart, a failover, a network
        reset, `idle_session_timeout` or `pg_terminate_backend` ends the session under a
        living worker, which keeps heartbeating; taken for dead at once, it would lose its
        jobs at every probe until they died of spent attempts. Its `AdvisoryLivenessLock`
        takes the lock again within about a second. After a restart every lock is free at
        once, so there is no probe at all while the server has been up for less than
        `liveness_restart_quiet` (`LIVENESS_RESTART_QUIET`). One probe runs at a time per
        database (`PROBE_LOCK`); a prober that finds another one at work skips its turn.

        The cost: a SIGKILLed worker's jobs come back after about `LIVENESS_GRACE` plus
        one probe interval (~4 s at default settings) instead of ~1 s; still far below the
        lease (90 s), which stays the backstop.
        """
        self.ensure_schema()
        with self.pool.transaction() as conn:
            start = conn.execute(q.PROBE_START, {"now": now}).fetchone()
            assert start is not None
            if not start["alone"]:
                return []  # another worker is probing right now
            if float(start["uptime"]) < self.liveness_restart_quiet:
                self._grace.forget()
                return []
            free = [r["id"] for r in conn.execute(q.PROBE_LIVENESS).fetchall()]
            dead = self._grace.observe(free, float(start["now"]))
            found = self._reclaim_dead(conn, now, dead, detected_by)
        self._grace.forget(dead)  # inactive now: no longer probed
        return found

    def liveness_suspects(self) -> dict[str, float]:
        """Workers whose liveness lock this instance found free, not yet for the whole
        grace: worker id -> the probe's time (epoch seconds) when it first found it free."""
        return self._grace.suspects()

    def listen(self, on_wake: Callable[[], None]) -> LivenessHandle:
        """Wake the caller whenever jobs are enqueued or replayed in this schema."""
        return Listener(self.pool.connect, self.channel, on_wake)
