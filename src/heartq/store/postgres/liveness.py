"""PostgreSQL liveness: a session advisory lock per worker, and a probe that believes a
free lock only once it has stayed free for a grace period.

A worker holds `pg_advisory_lock(LOCK_NAMESPACE, hashtext(worker_id))` on a session of its
own for its life (`AdvisoryLivenessLock`); the server frees it the instant that session
ends, which is when the process dies. But a session can also end under a living worker
(a server restart or failover, a network reset, `idle_session_timeout`,
`pg_terminate_backend`), so the lock's watcher takes it again on a new session, and the
probe (`PostgresStore.liveness_probe`, with `GraceTracker`) waits for a lock to stay free
for `LIVENESS_GRACE` before it reclaims.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from heartq.errors import StoreUnavailable
from heartq.store.interface import LivenessChange
from heartq.store.postgres import queries as q
from heartq.store.postgres.connection import Backoff, close_quietly, first_line

LIVENESS_GRACE = 3.0
"""Defaults to 3 s: how long a worker's liveness lock must stay free, on consecutive
probes (database time), before the probe takes the worker for dead. A session that
dropped under a living worker is taken again well within it (`LOCK_CHECK_INTERVAL`)."""
LIVENESS_RESTART_QUIET = 3 * LIVENESS_GRACE
"""Defaults to 9 s (3 x `LIVENESS_GRACE`): no liveness probe while the server has been up
for less than this. A restart ends every session, so every lock is free at once until
each living worker has reconnected and taken its own again."""
LOCK_CHECK_INTERVAL = 0.5
"""Defaults to 0.5 s between two checks of the session that holds a worker's liveness lock
(and between two attempts to take the lock again once a new session is open)."""
RELEASE_TIMEOUT = 2.0
"""Seconds `release()` waits for a session's thread to stop (it closes its session)."""

LOCK_NAMESPACE = q.LOCK_NAMESPACE
PROBE_LOCK = q.PROBE_LOCK

Conn = psycopg.Connection[Any]


class AdvisoryLivenessLock:
    """A session advisory lock, held on a session of its own for the worker's life.

    A watcher thread checks the session every `LOCK_CHECK_INTERVAL`; once it is gone, it
    opens a new one (at once, then backing off while the server is away) and takes the
    lock again (`pg_try_advisory_lock`; if a probe or the old session still has it, again
    at the next check). It tells `on_change` when the lock is lost and when it is back
    (the worker logs `liveness_lock_lost` and `liveness_lock_restored`). Until the lock is
    back, probes find it free: they only believe a lock that stays free for
    `LIVENESS_GRACE`.
    """

    def __init__(
        self,
        connect: Callable[[], Conn],
        worker_id: str,
        on_change: Callable[[LivenessChange], None] | None = None,
    ) -> None:
        self._connect = connect
        self._params = {"worker_id": worker_id}
        self._on_change = on_change or (lambda change: None)
        conn = connect()
        try:
            locked = self._take(conn)
        except BaseException:
            close_quietly(conn)
            raise
        if not locked:
            close_quietly(conn)
            raise StoreUnavailable(f"liveness lock of worker {worker_id} is already held")
        self._conn: Conn | None = conn  # the watcher's from here on
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._watch, name="heartq-liveness-lock", daemon=True
        )
        self._thread.start()

    def _take(self, conn: Conn) -> bool:
        row = conn.execute(q.LIVENESS_LOCK, self._params).fetchone()
        return bool(row and row["locked"])

    def _alive(self, conn: Conn) -> str | None:
        """None while the session answers; else why it is gone."""
        try:
            conn.execute(q.PING)
        except Exception as exc:  # noqa: BLE001 - whatever it was, the session is gone
            return first_line(exc)
        return None

    def _retake(self, conn: Conn | None) -> tuple[Conn | None, bool]:
        """A session (new if needed) and whether it holds the lock again."""
        try:
            if conn is None:
                conn = self._connect()
            return conn, self._take(conn)  # False: a probe or the old session has it
        except Exception:  # noqa: BLE001 - the server may be away: try again later
            close_quietly(conn)
            return None, False

    def _watch(self) -> None:
        conn, self._conn = self._conn, None
        held, lost_at, wait = True, 0.0, LOCK_CHECK_INTERVAL
        backoff = Backoff()
        try:
            while not self._stop.wait(wait):
                wait = LOCK_CHECK_INTERVAL
                if held and conn is not None:
                    error = self._alive(conn)
                    if error is None:
                        continue
                    close_quietly(conn)
                    conn, held, lost_at = None, False, time.monotonic()
                    backoff.reset()
                    wait = backoff.next()  # at once
                    self._on_change(LivenessChange(lost=True, error=error))
                    continue
                conn, held = self._retake(conn)
                if conn is None:
                    wait = backoff.next()
                elif held:
                    after = round(time.monotonic() - lost_at, 3)
                    self._on_change(LivenessChange(lost=False, after=after))
        finally:
            close_quietly(conn)  # closing the session drops its advisory locks

    def release(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(RELEASE_TIMEOUT)


class GraceTracker:
    """The prober's memory: since when (database time) each worker's lock has been free.

    `observe(free, t)` records one probe's reading and answers which workers have now
    been free for the whole `grace`; a worker found holding its lock again is forgotten.
    Per store instance, so a single probe of a fresh instance never reclaims."""

    def __init__(self, grace: float = LIVENESS_GRACE) -> None:
        self.grace = grace
        self._free_since: dict[str, float] = {}
        self._lock = threading.Lock()

    def observe(self, free: Sequence[str], t: float) -> list[str]:
        with self._lock:
            self._free_since = {w: self._free_since.get(w, t) for w in free}
            return [w for w in free if t - self._free_since[w] >= self.grace]

    def forget(self, worker_ids: Sequence[str] | None = None) -> None:
        """Forget these workers (inactive now: no longer probed), or everyone."""
        with self._lock:
            if worker_ids is None:
                self._free_since = {}
            for worker_id in worker_ids or ():
                self._free_since.pop(worker_id, None)

    def suspects(self) -> dict[str, float]:
        with self._lock:
            return dict(self._free_since)
