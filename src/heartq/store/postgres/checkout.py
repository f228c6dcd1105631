"""How a connection leaves heartq's pool: sound, or replaced at once, with no backoff.

psycopg_pool can check each connection on its way out (its `check`), but it treats a
failed check as a sign the server is away: it waits before it tries the next connection
(nothing after the first failure, then 1 s, 2 s, 4 s ... up to its 5 s timeout). A
failed check says only that this one connection is broken, and a server that ended one
session of a process (`pg_terminate_backend`, an administrator clearing a role's
sessions) usually ended them all: every connection waiting in the pool is broken, each is
handed out in turn, and each costs a longer wait. With the server up the whole time, a
worker whose sessions were terminated claimed nothing for about a second with 2 pooled
connections, and with 8 (`pool_size=8`) a caller failed "no connection within 5 s",
then the next caller again, once per four dead connections.

So heartq checks the connections itself (`Checkouts.take`), as the pool would, and
discards a dead one at once: the pool opens its replacement in the background (it does
for every connection it is given back closed) and the caller takes the next connection,
sound or not yet checked, at once. Dead connections cost a caller a failed round trip
each (the server's last words are already on the socket: no network wait), then the
time to open one connection. While the server is away no connection is opened, and a
caller still fails after the pool's timeout, as before: what waits on a server that does
not answer is the pool's own backoff in opening connections, not the check.
"""

from __future__ import annotations

import contextlib
import select
import time
import weakref
from typing import Any

import psycopg
import psycopg_pool
from psycopg_pool import PoolTimeout

Conn = psycopg.Connection[Any]

CHECK_IDLE_AFTER = 1.0
"""Seconds a pooled connection may sit unused before it is checked with a round trip on
its way out. Checking every checkout doubled the round trips of the hot path (a claim
or a finish is one statement); a connection used less than a second ago is checked
without one: a server that ended its session (a restart, `pg_terminate_backend`) has
written to its socket, so heartq checks, and replaces, a connection with anything to
read."""
BUSY_WAIT_MAX = 60.0
"""Seconds at most a caller waits for a pooled connection while the pool's connections
are busy, not broken. psycopg_pool gives up after its timeout (`CONNECT_TIMEOUT`, 5 s)
whatever the reason; over a slow link (200 ms each way) a worker at concurrency 10 whose
tasks use `ctx.transaction()` kept its 2 connections busy for longer than that, and its
tasks failed "no connection within 5 s" as if the server were away. A caller waits on
while connections keep coming back to the pool in working order; a pool whose
connections are stuck (a partition, a frozen server) still fails after the timeout."""

_last_used: weakref.WeakKeyDictionary[Conn, tuple[float, float]] = weakref.WeakKeyDictionary()
"""When each pooled connection's last use that went well began and ended (monotonic)."""
pooled: weakref.WeakSet[Conn] = weakref.WeakSet()
"""Every connection heartq's pools opened (`adopt`), so that psycopg_pool's warning for
each one discarded closed is not logged: heartq reports the state of the database itself
(`connection._QuietConnectionFailures`)."""


def adopt(conn: Conn) -> None:
    """Call for each connection a heartq pool opens."""
    pooled.add(conn)


def _has_input(conn: Conn) -> bool:
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
    return bool(poller.poll(0))


class Checkouts:
    """The checkouts of one pool: sound connections only, a busy pool waited on."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        """Seconds a caller waits for a sound connection while none comes back to the
        pool in working order (psycopg_pool's own `timeout`)."""
        self._returned = 0  # connections given back in working order
        self._broken_at = 0.0  # when a connection last broke in use (monotonic)

    def take(self, pool: psycopg_pool.ConnectionPool[Any]) -> Conn:
        """A sound connection of `pool` (`sound`), broken ones discarded on the way. A wait
        that timed out while other connections came back to the pool from work that went
        well is a queue, not an outage, and goes on (up to `BUSY_WAIT_MAX`); while the
        server is away nothing goes well, and a caller fails after `timeout`
        (`PoolTimeout`)."""
        began = time.monotonic()
        deadline = began + self.timeout
        while True:
            returned = self._returned
            try:
                conn: Conn = pool.getconn(max(deadline - time.monotonic(), 0.001))
            except PoolTimeout:
                now = time.monotonic()
                if self._returned == returned or now - began >= BUSY_WAIT_MAX:
                    raise
                deadline = now + self.timeout
                continue
            if self._sound_or_back(pool, conn):
                return conn
            if time.monotonic() >= deadline:
                raise PoolTimeout(f"no sound connection within {self.timeout:g} s")

    def take_idle(self, pool: psycopg_pool.ConnectionPool[Any], wait: float) -> Conn | None:
        """A sound connection of `pool` if one comes within `wait` seconds (broken ones
        discarded on the way), else None."""
        while True:
            try:
                conn: Conn = pool.getconn(wait)
            except PoolTimeout:
                return None
            if self._sound_or_back(pool, conn):
                return conn

    def _sound_or_back(self, pool: psycopg_pool.ConnectionPool[Any], conn: Conn) -> bool:
        """Whether `conn` is `sound`; if not, it goes back to `pool`, closed, and the pool
        opens its replacement now."""
        try:
            if self.sound(conn):
                return True
        except BaseException:  # an interrupt mid-check: the connection goes back
            pool.putconn(conn)
            raise
        pool.putconn(conn)
        return False

    def sound(self, conn: Conn) -> bool:
        """Whether `conn` may be handed out. A round trip checks a connection unused for
        `CHECK_IDLE_AFTER`, one with something unread (an idle pooled session hears
        nothing unless the server ended it), and one last used before another of the
        pool was found broken (at its check or in use): the server may have ended every
        session of the process, and a session it is ending may not have said so yet
        (its process is signalled at once, but writes its last words only when next
        scheduled: tens of milliseconds on a busy machine). A round trip cannot pass
        such a session: its process ends before it reads another query. What vouches
        for a connection is a use that began after the break, not one that ended after
        it: a use under way when the server ended the session can still end well (its
        answer was written before the process read its signal), and such a connection,
        given back just after another was found broken, was handed out unchecked and
        failed (a worker's claim, terminated in flight, failed twice and paused a
        second). A connection that fails is closed, for the pool to replace."""
        began, ended = _last_used.get(conn, (0.0, 0.0))
        idle = time.monotonic() - ended >= CHECK_IDLE_AFTER
        if not idle and began > self._broken_at and not _has_input(conn):
            return True
        try:
            psycopg_pool.ConnectionPool.check_connection(conn)
        except Exception:  # noqa: BLE001 - whatever failed, this connection is not used again
            self._broken_at = time.monotonic()
            with contextlib.suppress(Exception):
                conn.close()
            return False
        return True

    def went_well(self, conn: Conn, began: float) -> None:
        """`conn`'s work, lent at `began` (monotonic), went well and it goes back to the
        pool: a queue moves (one given back after an error, the server away perhaps, is
        no reason to wait on)."""
        _last_used[conn] = (began, time.monotonic())
        self._returned += 1

    def went_wrong(self, conn: Conn, exc: BaseException) -> None:
        """`conn`'s work failed with `exc`: if the connection broke (the server ended its
        session, a reset), every connection of the pool last used before now is checked
        with a round trip on its way out (`sound`). An `OperationalError` counts as a
        break even while the connection still looks open: libpq hands over the server's
        last words ("terminating connection due to administrator command") before it
        reads the end of the stream, and a claim whose connection was ended under it,
        retried at once, was handed the pool's other connection unchecked, ended too,
        and failed again (a second failure pauses the claim a second: 1.02 s to the next
        job in a clean-clone run beside a CPU burner)."""
        if conn.closed or isinstance(exc, psycopg.OperationalError):
            self._broken_at = time.monotonic()
