"""PostgreSQL wake-ups: LISTEN on the schema's channel, so an enqueue wakes idle workers
on every host at once instead of at their next poll."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg

from heartq.store.postgres.connection import Backoff, close_quietly

LISTEN_TIMEOUT = 1.0
"""Seconds the listener waits for a notification before it checks whether to stop."""

Conn = psycopg.Connection[Any]


class Listener:
    """LISTENs on the schema's channel; calls `on_wake()` for every notification.

    If the LISTEN session drops (a server restart, a network reset, ...), its thread opens
    a new one (at once, then backing off while the server is away), LISTENs again and
    calls `on_wake()` once, for what was enqueued meanwhile."""

    def __init__(
        self, connect: Callable[[], Conn], channel: str, on_wake: Callable[[], None]
    ) -> None:
        self._connect = connect
        self._listen = psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel))
        self._on_wake = on_wake
        self._stop = threading.Event()
        self._conn: Conn | None = self._open()  # the thread's from here on
        self._thread = threading.Thread(target=self._loop, name="heartq-listen", daemon=True)
        self._thread.start()

    def _open(self) -> Conn:
        conn = self._connect()
        try:
            conn.execute(self._listen)
        except BaseException:
            close_quietly(conn)
            raise
        return conn

    def _reopen(self, backoff: Backoff) -> Conn | None:
        """A new LISTEN session after a backoff, or None (stopping, or the server away)."""
        if self._stop.wait(backoff.next()):
            return None
        try:
            conn = self._open()
        except Exception:  # noqa: BLE001 - the server may be away: try again later
            return None
        backoff.reset()
        self._on_wake()  # jobs may have come while nobody listened
        return conn

    def _loop(self) -> None:
        conn, self._conn = self._conn, None
        backoff = Backoff()
        try:
            while not self._stop.is_set():
                if conn is None:
                    conn = self._reopen(backoff)
                    continue
                try:
                    for _ in conn.notifies(timeout=LISTEN_TIMEOUT, stop_after=1):
                        self._on_wake()
                except psycopg.Error:
                    close_quietly(conn)
                    conn = None
                    continue
                if conn.closed or conn.broken:
                    close_quietly(conn)
                    conn = None
        finally:
            close_quietly(conn)

    def release(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(LISTEN_TIMEOUT + 1)
