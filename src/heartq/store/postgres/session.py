"""The one PostgreSQL session a process keeps for its life: liveness locks and LISTEN.

A worker needs a session that stays open for two things, both tied to a session rather
than to a transaction: its liveness lock (a session advisory lock, `advisory_locks.py`) and
its LISTEN for wake-ups (and `App.result`'s LISTEN for ends). One session carries all of
them, so a worker holds its pooled connections plus this one (at most 3 at default
settings) instead of a session per purpose.

The session's thread owns the connection. It waits for notifications (on the socket,
until its next ping is due, without holding psycopg's lock: `lend`) and hands each to the
channel's users, lends the session for a statement that must not wait for the pool
(the worker's heartbeat: `lend`), pings the session every
`LOCK_CHECK_INTERVAL` (a session that dropped silently fails within `tcp_user_timeout`),
and applies what its users want: locks to take or free, channels to LISTEN or UNLISTEN.
When the session drops (a server restart or failover, a network reset,
`pg_terminate_backend`) it tells each lock's owner (`LivenessChange(lost=True)`), opens a
new session (at once, then backing off while the server is away), LISTENs again, tells
each channel's users that notifications may have been missed (`None`), and takes each
lock again (`pg_try_advisory_lock`; if a probe or the old session still has it, again at
the next check), telling its owner when it is back.

Sessions do not survive a fork: a child process opens its own.
"""

from __future__ import annotations

import contextlib
import os
import random
import select
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import psycopg
from psycopg import sql

from heartq.errors import StoreUnavailable
from heartq.model import LivenessChange
from heartq.store.postgres import queries as q
from heartq.store.postgres.advisory_locks import LOCK_CHECK_INTERVAL, RELEASE_TIMEOUT
from heartq.store.postgres.connection import close_quietly, first_line
from heartq.store.postgres.refusals import pooler_hint

Conn = psycopg.Connection[Any]
OnChange = Callable[[LivenessChange], None]
OnNotify = Callable[[str | None], None]
T = TypeVar("T")

RECONNECT_DELAY_MIN = 0.1
"""Defaults to 0.1 s before the second attempt to reopen a dropped session (the first
one is immediate); the delay doubles, with jitter, up to `RECONNECT_DELAY_MAX`."""
RECONNECT_DELAY_MAX = 2.0
"""Defaults to 2 s at most between two attempts to reopen a dropped session: below the
liveness grace (3 s), so a worker is back in time once the server answers again."""


class Backoff:
    """Delays between attempts to reopen a session: none, then doubling with jitter."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._next = 0.0

    def next(self) -> float:
        delay = self._next
        self._next = min(max(2 * self._next, RECONNECT_DELAY_MIN), RECONNECT_DELAY_MAX)
        return delay * random.uniform(0.75, 1.0)


APPLY_TIMEOUT = 5.0
"""Seconds a user waits for the thread to take its lock or LISTEN (the session may be
reopening meanwhile)."""
LEND_TIMEOUT = 1.0
"""Seconds `lend` waits for the thread to hand the session over (it is between two turns
at once, unless a ping or a lock is on its way over a slow link) before it gives up and
the caller uses the pool."""


class LastingSession:
    """A store's one `SharedSession`, shared by its liveness locks (`liveness.py`), its
    LISTENs (`notifications.py`) and its heartbeat (`PostgresDialect.write_renewal`):
    opened on first use, and anew once the last user of the previous one let it go."""

    def __init__(self, connect: Callable[[], Conn]) -> None:
        self._connect = connect
        self._lock = threading.Lock()
        self.current: SharedSession | None = None
        """The session open now, if any (None: none was needed yet, or it was closed)."""

    def get(self) -> SharedSession:
        """The open session, or a new one once the last user of the previous one let it go."""
        with self._lock:
            if self.current is None or self.current.closed:
                self.current = SharedSession(self._connect)
            return self.current

    def close(self) -> None:
        with self._lock:
            session, self.current = self.current, None
        if session is not None:
            session.close()


class SharedSession:
    """One session, its thread, and what its users want of it.

    Users attach with `hold_lock` and `listen` and detach with the handle's `close`;
    the last one to detach closes the session (`closed` turns True, and a store opens a
    new `SharedSession` for the next user)."""

    def __init__(self, connect: Callable[[], Conn]) -> None:
        self._connect = connect
        self._mutex = threading.Lock()
        self._applied = threading.Condition(self._mutex)
        self._starting = threading.Lock()
        self._locks: dict[str, OnChange] = {}  # worker id -> its owner's on_change
        self._channels: dict[str, list[OnNotify]] = {}
        self._held: set[str] = set()  # on the current session (written by the thread)
        self._listening: set[str] = set()
        self._refused: set[str] = set()  # a first try found the lock taken
        self._lost_at: dict[str, float] = {}  # locks lost with a session, not yet back
        self._wanted = 0  # generation of what the users want ...
        self._done = 0  # ... and of what the thread has applied
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._first: Conn | None = None
        self._dropped = False  # the session dropped and is not open again yet
        self._reopened_at: float | None = None  # when it was last opened again (monotonic)
        self._live: Conn | None = None  # the open session, while the thread serves it
        self._loans: list[_Loan] = []  # borrowers waiting for the session (`lend`)
        self._wake_r, self._wake_w = os.pipe()  # a byte wakes the thread's wait
        os.set_blocking(self._wake_w, False)
        self.closed = False

    # -- users ---------------------------------------------------------------------------
    def hold_lock(self, worker_id: str, on_change: OnChange) -> _LockHandle | None:
        """Take `worker_id`'s liveness lock on this session and keep it (taken again after
        the session drops). None if this session is closing (the caller opens another);
        `StoreUnavailable` if the lock is held elsewhere or the session cannot be opened."""
        with self._mutex:
            if self.closed:
                return None
            self._locks[worker_id] = on_change
            self._refused.discard(worker_id)
            generation = self._want()
        self._wait_applied(generation)
        with self._mutex:
            if worker_id in self._held:
                return _LockHandle(self, worker_id)
            refused = worker_id in self._refused
            self._locks.pop(worker_id, None)
            self._want()
        self._close_if_unused()
        why = "is already held" if refused else "could not be taken (no session)"
        raise StoreUnavailable(f"liveness lock of worker {worker_id} {why}")

    def listen(self, channel: str, on_notify: OnNotify) -> _ChannelHandle | None:
        """Call `on_notify(payload)` for every notification on `channel`, and
        `on_notify(None)` after the session was reopened. None if this session is closing."""
        with self._mutex:
            if self.closed:
                return None
            self._channels.setdefault(channel, []).append(on_notify)
            generation = self._want()
        self._wait_applied(generation)
        return _ChannelHandle(self, channel, on_notify)

    def unsettled(self, within: float) -> bool:
        """True while this session is down after it dropped, and for `within` seconds
        after it was opened again: a time when other processes' sessions to the same
        server may well be reopening too (a failover or a restart ends them all), so a
        free lock says little (`AdvisoryLiveness.gone`)."""
        with self._mutex:
            if self._dropped:
                return True
            reopened = self._reopened_at
        return reopened is not None and time.monotonic() - reopened < within

    @contextlib.contextmanager
    def lend(self, timeout: float = LEND_TIMEOUT) -> Iterator[Conn | None]:
        """The open session for one short piece of work (autocommit, the queue's schema),
        or None if it is down or not handed over within `timeout` (the caller uses the
        pool). The thread waits, serving nobody, until the block ends.

        Why: a worker's heartbeat is what tells the fleet it lives. Through the pool it
        queued behind the worker's claims and finishes, and over a slow link (400 ms a
        round trip) the pool's two connections were busy long enough for heartbeats to
        time out waiting for one: a live worker looked gone. The session is idle but for
        a ping every `LOCK_CHECK_INTERVAL`."""
        loan = _Loan()
        with self._mutex:
            open_now = not (self.closed or self._dropped or self._live is None)
            if open_now:
                self._loans.append(loan)
        if not open_now:
            yield None
            return
        self._wake()
        if not loan.lent.wait(timeout):
            with self._mutex:
                withdrawn = loan in self._loans
                if withdrawn:
                    self._loans.remove(loan)
            if withdrawn:
                yield None
                return
            loan.lent.wait()  # handed over just now: it is ours
        try:
            yield loan.conn
        finally:
            loan.returned.set()

    def _wake(self) -> None:
        with self._mutex:
            self._knock()

    def _knock(self) -> None:
        """Call with the mutex held: wake the thread's wait."""
        with contextlib.suppress(OSError):  # full: already woken
            if self._wake_w >= 0:  # not closed (under the mutex: never a reused number)
                os.write(self._wake_w, b"x")

    def _want(self) -> int:
        """Call with the mutex held: a new generation of wishes for the thread, which is
        woken to apply it."""
        self._wanted += 1
        self._knock()
        return self._wanted

    def _wait_applied(self, generation: int) -> None:
        """Start the thread if needed (its first session opened here, so a failure is the
        caller's), then wait until it applied `generation`."""
        self._start()
        deadline = time.monotonic() + APPLY_TIMEOUT
        with self._mutex:
            while self._done < generation and not self.closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._applied.wait(left)

    def _start(self) -> None:
        with self._starting:
            if self._thread is not None:
                return
            try:
                self._first = self._connect()
            except BaseException:
                with self._mutex:
                    self._locks.clear()
                    self._channels.clear()
                    self.closed = True
                self._close_pipe()
                raise
            self._thread = threading.Thread(target=self._run, name="heartq-pg-session", daemon=True)
            self._thread.start()

    def _unlock(self, worker_id: str) -> None:
        with self._mutex:
            if self._locks.pop(worker_id, None) is None:
                return
            self._lost_at.pop(worker_id, None)
            generation = self._want()
        if not self._close_if_unused():
            self._wait_applied(generation)  # unlocked when close() returns

    def _unlisten(self, channel: str, on_notify: OnNotify) -> None:
        with self._mutex:
            users = self._channels.get(channel, [])
            if on_notify in users:
                users.remove(on_notify)
            if not users:
                self._channels.pop(channel, None)
            self._want()
        self._close_if_unused()

    def _close_if_unused(self) -> bool:
        """Close the session once nobody wants anything of it; True if it did."""
        with self._mutex:
            if self._locks or self._channels or self.closed:
                return self.closed
            self.closed = True
            self._applied.notify_all()
        self.close()
        return True

    def close(self) -> None:
        """Stop the thread; closing its session frees every lock and LISTEN on it."""
        with self._mutex:
            self.closed = True
            self._applied.notify_all()
        self._stop.set()
        self._wake()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(RELEASE_TIMEOUT)
        close_quietly(self._first)
        if thread is None or not thread.is_alive():
            self._close_pipe()

    def _close_pipe(self) -> None:
        with self._mutex:
            fds, self._wake_r, self._wake_w = (self._wake_r, self._wake_w), -1, -1
        for fd in fds:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)

    # -- the thread ----------------------------------------------------------------------
    def _run(self) -> None:
        conn, self._first = self._first, None
        backoff = Backoff()
        reopened = False
        last_ping = time.monotonic()
        fatal: list[str] = []
        if conn is not None:
            self._hear_fatal(conn, fatal)
        try:
            while not self._stop.is_set():
                if conn is None:
                    if self._stop.wait(backoff.next()):
                        break
                    try:
                        conn = self._connect()
                    except Exception:  # noqa: BLE001 - the server may be away: try later
                        continue
                    self._hear_fatal(conn, fatal)
                    backoff.reset()
                    reopened, last_ping = True, time.monotonic()
                    with self._mutex:
                        self._dropped, self._reopened_at = False, last_ping
                try:
                    with self._mutex:
                        self._live = conn
                    last_ping = self._serve(conn, reopened, last_ping)
                    reopened = False
                except Exception as exc:  # noqa: BLE001 - whatever it was, the session is gone
                    with self._mutex:
                        self._live = None
                    close_quietly(conn)
                    conn = None
                    self._lost(fatal[-1] if fatal else first_line(exc) + pooler_hint(exc))
                    backoff.reset()  # the first attempt to reopen is immediate
        finally:
            with self._mutex:
                self._live = None
                loans, self._loans = self._loans, []
            for loan in loans:
                loan.lent.set()  # conn None: the borrower uses the pool
            close_quietly(conn)
            with self._mutex:
                self._held.clear()
                self._listening.clear()
                self.closed = True
                self._applied.notify_all()
            if self._stop.is_set():
                self._close_pipe()

    @staticmethod
    def _hear_fatal(conn: Conn, fatal: list[str]) -> None:
        """Keep the server's last words on this session: a session ended while waiting
        for notifications reports only "server closed the connection", and the reason
        ("terminating connection due to administrator command") arrives as a notice."""
        fatal.clear()

        def on_notice(diagnostic: psycopg.errors.Diagnostic) -> None:
            if diagnostic.severity in ("FATAL", "PANIC") and diagnostic.message_primary:
                fatal.append(diagnostic.message_primary)

        conn.add_notice_handler(on_notice)

    def _serve(self, conn: Conn, reopened: bool, last_ping: float) -> float:
        """One turn on a live session; returns when it was last pinged."""
        with self._mutex:
            pending = self._done < self._wanted
        if reopened or pending:
            self._apply(conn, retake=reopened)
        if reopened:
            for users in self._channel_users():
                for on_notify in users:
                    _tell(on_notify, None)  # something may have happened meanwhile
        self._serve_loans(conn)
        self._wait(conn, last_ping + LOCK_CHECK_INTERVAL - time.monotonic())
        for notification in conn.notifies(timeout=0):  # what came, and what came meanwhile
            with self._mutex:
                users = list(self._channels.get(notification.channel, ()))
            for on_notify in users:
                _tell(on_notify, notification.payload)
        if time.monotonic() - last_ping >= LOCK_CHECK_INTERVAL:
            conn.execute(q.PING)
            with self._mutex:
                lost = bool(self._lost_at)
            if lost:
                self._apply(conn, retake=True)  # a lock the old session may still hold
            return time.monotonic()
        return last_ping

    def _wait(self, conn: Conn, seconds: float) -> None:
        """Wait up to `seconds` (until the next ping is due) for the server to send
        something or a knock on the pipe (a borrower, a user's new wish, a stop: each
        knocks), on the socket itself: psycopg's `notifies(timeout=)` holds the
        connection's lock while it waits, and a thread waiting for that lock (it is not
        fair) could wait through many turns. An idle session wakes only to ping: waking
        every 0.1 s as well was a third of an idle worker's CPU (40 idle workers, 0.127
        cores, then 0.083)."""
        with self._mutex:
            if self._loans:
                return
            wake = self._wake_r
        if wake < 0:
            return
        poller = select.poll()  # not select.select: it refuses descriptors over 1023
        poller.register(conn.fileno(), select.POLLIN)
        poller.register(wake, select.POLLIN)
        ready = [fd for fd, _ in poller.poll(max(0, round(seconds * 1000)))]
        if wake in ready:
            with contextlib.suppress(OSError):
                os.read(wake, 4096)

    def _serve_loans(self, conn: Conn) -> None:
        """Hand the session to each waiting borrower in turn, and wait for it back."""
        while True:
            with self._mutex:
                if not self._loans:
                    return
                loan = self._loans.pop(0)
            loan.conn = conn
            loan.lent.set()
            loan.returned.wait()

    def _channel_users(self) -> list[list[OnNotify]]:
        with self._mutex:
            return [list(users) for users in self._channels.values()]

    def _apply(self, conn: Conn, retake: bool) -> None:
        """Make the session hold what its users want: take and free locks, LISTEN and
        UNLISTEN; a lock lost with an earlier session is tried again only if `retake`."""
        with self._mutex:
            generation = self._wanted
            locks = dict(self._locks)
            channels = set(self._channels)
            held, listening = set(self._held), set(self._listening)
            lost_at = dict(self._lost_at)
        refused: set[str] = set()
        restored: list[tuple[OnChange, float]] = []
        for worker_id in sorted(locks.keys() - held):
            if worker_id in lost_at and not retake:
                continue
            row = conn.execute(q.LIVENESS_LOCK, {"worker_id": worker_id}).fetchone()
            if row and row["locked"]:
                held.add(worker_id)
                if worker_id in lost_at:
                    after = round(time.monotonic() - lost_at[worker_id], 3)
                    restored.append((locks[worker_id], after))
            elif worker_id not in lost_at:
                refused.add(worker_id)  # a first try: the caller hears it is taken
        for worker_id in sorted(held - locks.keys()):
            conn.execute(q.LIVENESS_UNLOCK, {"worker_id": worker_id})
            held.discard(worker_id)
        for channel in sorted(channels - listening):
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            listening.add(channel)
        for channel in sorted(listening - channels):
            conn.execute(sql.SQL("UNLISTEN {}").format(sql.Identifier(channel)))
            listening.discard(channel)
        with self._mutex:
            self._held, self._listening = held, listening
            for worker_id in held:
                self._lost_at.pop(worker_id, None)
            self._refused |= refused
            self._done = max(self._done, generation)
            self._applied.notify_all()
        for on_change, after in restored:
            _tell(on_change, LivenessChange(lost=False, after=after))

    def _lost(self, error: str) -> None:
        """The session dropped: nothing is held or listened to any more."""
        now = time.monotonic()
        with self._mutex:
            self._dropped = True
            lost = [(w, self._locks[w]) for w in sorted(self._held) if w in self._locks]
            for worker_id, _ in lost:
                self._lost_at[worker_id] = now
            self._held.clear()
            self._listening.clear()
        for _, on_change in lost:
            _tell(on_change, LivenessChange(lost=True, error=error))


def _tell(callback: Callable[[T], None], value: T) -> None:
    """Call a user's callback; one that raises must not be taken for a dropped session
    (backends do not log: the callbacks are the worker's, and log themselves)."""
    with contextlib.suppress(Exception):
        callback(value)


class _Loan:
    """A borrower's wait for the session (`SharedSession.lend`)."""

    def __init__(self) -> None:
        self.conn: Conn | None = None
        self.lent = threading.Event()
        self.returned = threading.Event()


class _LockHandle:
    """A worker's liveness lock on the shared session; `close()` frees it."""

    def __init__(self, session: SharedSession, worker_id: str) -> None:
        self.session = session
        self.worker_id = worker_id

    def close(self) -> None:
        self.session._unlock(self.worker_id)


class _ChannelHandle:
    """A LISTEN on the shared session; `close()` stops it."""

    def __init__(self, session: SharedSession, channel: str, on_notify: OnNotify) -> None:
        self.session = session
        self._channel = channel
        self._on_notify = on_notify

    def close(self) -> None:
        self.session._unlisten(self._channel, self._on_notify)
