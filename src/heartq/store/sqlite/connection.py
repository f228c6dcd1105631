"""Opening SQLite files safely for many processes, writing to them in transactions that
hot writes share, and turning its errors into clear ones.

Each thread gets its own connection (sqlite3 connections are not meant to be shared across
threads mid-transaction). Options, all fixed per store: WAL journal (readers never block
the writer), `synchronous=FULL` by default (a committed outcome survives power loss, since
"saved" must mean saved; `?synchronous=normal` trades that for speed, see
`SYNCHRONOUS`), and a busy timeout during which a writer waits for the lock.

The file can go bad under a running process, and a connection would not notice: one
opened before a `chmod` keeps writing, and one whose file was deleted keeps writing to
the deleted copy, which vanishes with the last process holding it. So every write
transaction first checks that the path still names the file its connection opened and
that the file is writable (`_check_file`: one `stat` and one `access`), and so does every
hot write that joins a transaction left open; if not, nothing is written and the write
fails with `StoreUnavailable` (`faults.py`). A file replaced under
the process (restored by an operator) is reopened by every thread at its next use. Once a
file was opened, it is never created again: a deleted database is not silently replaced
by an empty one. A nearly full disk is the WAL guard's (`wal.py`).

SQLite opens a file it may not write read-only, without a word, and that connection
refuses every write for good, even once the file is writable again. So a new connection
is kept only if the file is still writable once it is open (`check_location`, before
and after the open), and a write SQLite refuses as read-only has every thread reopen
its connection at its next use (`_write_failed`: the file was made read-only and
writable again between the open and the look after it). A worker's threads open theirs
at their first use, which can meet a `chmod`: a thread whose connection was kept
read-only failed at each pass long after the outage, while the other threads' writes
landed (`store_unavailable` and `store_recovered` in turn, for one outage).

One commit for the hot writes of a process's threads that meet at SQLite's write lock
(`write(share=True)`, `SharedCommit`). A worker writes from several threads: the fetch
loop claims, the completer finishes, the heartbeater renews. On SQLite they queue for one
write lock per process (and the file's lock between processes), and each write pays its
own `BEGIN IMMEDIATE` and its own `COMMIT`, an fsync at `synchronous=FULL`. Measured in
the benchmark's two workers of no-op jobs (docs/BENCHMARKS.md, eleventh session): each
thread spent a third of its time waiting for the other's transaction, and a commit took
1.8 ms of the 6 ms a transaction held the file's lock.

So a hot write (`ConnectionPool.write(share=True)`: claim, start of claimed-ahead jobs,
heartbeat, pulse, finish, and an enqueue of at most `SHARED_ENQUEUE_JOBS` jobs) that
ends while another hot write of the process waits for the lock does not commit: it
leaves its transaction open for that one (a `SharedCommit`) and waits. The next hot
write runs inside the same transaction under a savepoint, so its failure rolls back its
own statements only, and the last one commits for all. Each caller still returns only
once its statements are committed, and raises if they are not: a commit that fails
fails every write that shared it. A write that does not share (a larger enqueue, a
migration, a periodic tick, an application's effects) first commits a transaction left
open, so it never waits behind another's statements, and never joins them.

Small enqueues share too: an application's threads (a web server's) that each enqueue a
job into one file queue at the write lock as the worker's threads do, and each paid an
fsync of its own (`bench/enqueue_one.py --only 'app x8 full'`, 8 threads enqueuing one
job a call at `synchronous=FULL`: 3,907 and 4,329 jobs/s alone, 5,804 and 6,170 sharing,
a commit for 4 enqueues instead of 1; one thread alone is unchanged).

What a write sharing the commit may wait for: the statements of at most
`MAX_SHARED - 1` other hot writes, each bounded by the worker's slots or batch sizes.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from heartq.errors import StoreBusy, StoreRefused, StoreUnavailable
from heartq.store.sqlite import faults
from heartq.store.sqlite.faults import translate
from heartq.store.sqlite.wal import WalGuard

__all__ = ["ConnectionPool", "check_location", "translate"]

DEFAULT_BUSY_TIMEOUT = 30.0
"""Defaults to 30 s that a writer waits for another process's write lock."""
DEFAULT_SYNCHRONOUS = "full"
"""Defaults to `synchronous=FULL`: every commit waits for the WAL's fsync."""
SYNCHRONOUS = {"full": "FULL", "normal": "NORMAL"}
"""The `?synchronous=` values heartq takes. In WAL mode, `full` syncs the WAL at every
commit: a committed write survives a process crash, an OS crash and a power loss.
`normal` syncs it only at checkpoints: a committed write survives a process crash (it
is in the file, in the OS's cache) and the database is never corrupted, but an OS crash
or a power loss may roll back the transactions committed since the last sync, acknowledged
enqueues and finishes among them. A commit waits for an fsync at `full` (0.12 ms on the
benchmark machine's disk when quiet, several ms while others write to it) and for none at
`normal` (docs/BENCHMARKS.md). `off` and `extra` are
refused: `off` may corrupt the file on an OS crash, and `extra` adds nothing in WAL mode."""


WRITE_LOCK_FIRST_PAUSE = 0.00005
"""Defaults to 50 µs: a writer that finds another process's write lock tries again that
soon, then after twice as long each time, up to `WRITE_LOCK_MAX_PAUSE`."""
WRITE_LOCK_MAX_PAUSE = 0.001
"""Defaults to 1 ms at most between a writer's tries for another process's write lock.
SQLite's own busy handler sleeps 1, 2, 5, 10, 15, 20, 25 ms and longer between tries:
with two busy workers on one file, each holding the lock for a millisecond or two at a
time, its waiters slept through most of the moments the lock was free."""


MAX_SHARED = 4
"""At most 4 writes share one commit (a worker has 3-4 threads that write): the first one
waits for the statements of 3 others at most."""
SHARED_ENQUEUE_JOBS = 100
"""An enqueue of at most 100 jobs shares commits; a larger batch would hold up the writes
that wait to commit with it for as long as its inserts take, so it commits alone."""
PARKED_CHECK = 0.05
"""A write that left its transaction open for a waiting one looks every 50 ms whether it
was taken: the waiter may have given up (its wait for the lock timed out), and then the
write commits its transaction itself."""
SAVEPOINT = "heartq_shared"


def check_location(path: Path) -> None:
    """Fail with one clear line before sqlite3 says 'unable to open database file'.
    `StoreRefused`: a missing directory, or one heartq may not write, is a setup to fix,
    not a passing fault, so a starting worker does not wait for it. A file made read-only
    is `read_only`, as when it happens under a running worker: it resumes by itself."""
    directory = path.absolute().parent
    if not directory.is_dir():
        problem = (
            f"{directory} is not a directory"
            if directory.exists()
            else f"directory {directory} does not exist"
        )
        raise StoreRefused(f"cannot open SQLite database {path}: {problem}")
    if path.exists() and not os.access(path, os.R_OK | os.W_OK):
        raise faults.read_only(path)  # transient: it resumes once the file is writable
    if not os.access(directory, os.W_OK | os.X_OK):
        raise StoreRefused(
            f"cannot open SQLite database {path}: directory {directory} is not writable "
            "(SQLite needs to create its -wal and -shm files there)"
        )


class SharedCommit:
    """One write transaction that hot writes of one process's threads take turns in.

    Only the thread that holds the pool's write lock touches it; `done` tells the writes
    that left it open that it ended, and `failure` why it did not commit (None: it did)."""

    def __init__(self, conn: sqlite3.Connection, identity: tuple[int, int]) -> None:
        self.conn = conn
        self.identity = identity  # the file `conn` opened: what a write joining it checks
        self.pid = os.getpid()  # a forked child never touches its parent's transaction
        self.writes = 1
        self.done = threading.Event()
        self.failure: sqlite3.Error | None = None

    def open_to(self, pid: int) -> bool:
        """Whether a write of process `pid` may join or end this transaction."""
        return self.pid == pid and not self.done.is_set()


class ConnectionPool:
    """One connection per thread, closed when its thread is gone, all closed together.

    Threads come and go (the process pool watches each child from a thread of its own,
    and that thread touches the store): a connection kept for every thread that ever
    used the store would leak a connection and its file descriptors per job. So each
    connection is kept with its thread, and opening a new one first closes those of
    threads that have ended (they cannot be in the middle of anything)."""

    def __init__(
        self,
        path: Path,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        synchronous: str = DEFAULT_SYNCHRONOUS,
        *,
        reading: bool = False,
    ) -> None:
        self.path = path
        self.reading = reading
        """Only reads are asked of it (the command line's read commands): a file it may
        not write is opened for reading (`_open_to_read`) rather than refused."""
        self.busy_timeout = busy_timeout
        self.synchronous = SYNCHRONOUS[synchronous]
        self._local = threading.local()
        self._by_thread: dict[threading.Thread, sqlite3.Connection] = {}
        self._pid = os.getpid()
        self._lock = threading.Lock()
        # Writers of one process queue here, where a release wakes the next at once;
        # SQLite's own busy handler polls with sleeps, which is for other processes only.
        self._write_lock = threading.Lock()
        self._sharers_waiting = 0  # hot writes waiting for `_write_lock`
        self._open_shared: SharedCommit | None = None  # left open by a hot write
        self.wal = WalGuard(path)
        self._opened_once = False  # from then on the file is never created again
        self._generation = 0  # bumped when the file was replaced: every thread reopens
        self.trace: list[object] = []  # callbacks(statement) for tests that count statements

    def get(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None and self._local.generation != self._generation:
            self._forget_own(conn)
            conn = None
        if conn is None:
            self._sweep()
            generation = self._generation
            conn = self._open()
            self._local.conn = conn
            self._local.generation = generation
            self._local.busy_handler = True  # `_open` set the busy timeout
            try:
                self._local.identity = _identity(self.path)
            except FileNotFoundError:
                self._forget_own(conn)
                raise faults.file_gone(self.path, "was deleted") from None
            with self._lock:
                self._by_thread[threading.current_thread()] = conn
        return conn

    def _forget_own(self, conn: sqlite3.Connection) -> None:
        """Close this thread's connection (its file was replaced); the next use reopens."""
        self._local.conn = None
        with self._lock:
            self._by_thread.pop(threading.current_thread(), None)
        with contextlib.suppress(sqlite3.Error):
            conn.close()

    def _check_file(self, identity: tuple[int, int]) -> None:
        """Refuse to write unless the path still names the writable file `identity` (of
        the connection that writes: see the module docstring)."""
        try:
            now = _identity(self.path)
        except FileNotFoundError:
            raise faults.file_gone(self.path, "was deleted") from None
        except OSError:
            return  # cannot tell: let SQLite say
        if now != identity:
            self._generation += 1
            raise faults.file_gone(self.path, "was replaced by another file") from None
        if not os.access(self.path, os.W_OK):
            raise faults.read_only(self.path)

    def _sweep(self) -> None:
        """Close the connections of threads that have ended. In a forked child, the
        parent's connections are forgotten, never closed (they are the parent's)."""
        with self._lock:
            if self._pid != os.getpid():
                self._pid = os.getpid()
                self._by_thread.clear()
            ended = [t for t in self._by_thread if not t.is_alive()]
            closing = [self._by_thread.pop(t) for t in ended]
        for conn in closing:
            with contextlib.suppress(sqlite3.Error):
                conn.close()

    @property
    def open_connections(self) -> int:
        """How many connections this pool holds open (tests check it stays bounded)."""
        with self._lock:
            return len(self._by_thread)

    def _open(self) -> sqlite3.Connection:
        if self.reading and self.path.is_file() and not os.access(self.path, os.W_OK):
            return self._open_to_read()
        check_location(self.path)
        if self._opened_once and not self.path.exists():
            raise faults.file_gone(self.path, "was deleted")
        mode = "rw" if self._opened_once else "rwc"
        try:
            conn = self._connect(mode, cached_statements=256)
        except sqlite3.Error as exc:
            raise translate(exc, self.path) from None
        try:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            self._enable_wal(conn)
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")  # one of SYNCHRONOUS
        except sqlite3.Error as exc:
            conn.close()
            raise translate(exc, self.path) from None
        self._opened_once = True
        if not self.reading:
            try:  # made read-only since the look above, SQLite opened it read-only
                check_location(self.path)
            except BaseException:
                conn.close()
                raise
        if self.trace:
            conn.set_trace_callback(self._on_statement)
        return conn

    def _connect(self, mode: str, cached_statements: int = 128) -> sqlite3.Connection:
        """The file opened in `mode` (a URI's `mode=`) with what every connection of this
        file shares: the busy timeout, autocommit, no same-thread check."""
        return sqlite3.connect(
            f"{self.path.absolute().as_uri()}?mode={mode}",
            uri=True,
            timeout=self.busy_timeout,
            isolation_level=None,
            check_same_thread=False,
            cached_statements=cached_statements,
        )

    def _open_to_read(self) -> sqlite3.Connection:
        """A file this process may read but not write, opened to read (`mode=ro`), never
        making a file beside it: SQLite would make the missing `-shm` file with the
        database's modes, read-only, and no writer could use the database once it is
        writable again. So with a `-shm` file SQLite reads through it; without one, and
        without a write-ahead log holding commits, the file alone holds every commit and is
        read as it is (`immutable=1`: no locks, no `-shm`); a log with commits but no
        `-shm` file (a writer that died) cannot be read safely, and is refused."""
        if not os.access(self.path, os.R_OK):
            raise StoreRefused(f"cannot read SQLite database {self.path}: permission denied")
        shm, wal = Path(f"{self.path}-shm"), Path(f"{self.path}-wal")
        if shm.exists():
            mode = "ro"
        elif wal.exists() and wal.stat().st_size > 0:
            raise faults.read_only(self.path)
        else:
            mode = "ro&immutable=1"
        try:
            conn = self._connect(mode)
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        except sqlite3.Error as exc:
            raise translate(exc, self.path) from None
        self._opened_once = True
        return conn

    def _enable_wal(self, conn: sqlite3.Connection) -> None:
        """Switch the file to WAL once. The switch needs an exclusive lock, and SQLite
        answers SQLITE_BUSY at once, without its busy handler, while another process
        opens or switches the same new file: retry until the busy timeout."""
        deadline = time.monotonic() + self.busy_timeout
        pause = 0.001
        while True:
            try:
                if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                    conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc).lower() or time.monotonic() >= deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def _on_statement(self, statement: str) -> None:
        for callback in list(self.trace):
            callback(statement)  # type: ignore[operator]

    def enable_trace(self) -> None:
        with self._lock:
            conns = list(self._by_thread.values())
        for conn in conns:
            conn.set_trace_callback(self._on_statement)

    @contextlib.contextmanager
    def write(self, share: bool = False) -> Iterator[sqlite3.Connection]:
        """`BEGIN IMMEDIATE`: take the write lock up front, so no transaction ever fails
        half-way on a lock upgrade; everything inside commits or nothing does. With
        `share` (the worker's hot writes), the transaction and its commit may be shared
        with such writes of the process's other threads (`SharedCommit`): the
        statements inside still commit or fail as one."""
        self._take_write_lock(share)
        try:
            shared, joined = self._transaction_for(share)
        except BaseException:
            self._write_lock.release()
            raise
        conn = shared.conn
        try:
            if joined:
                conn.execute(f"SAVEPOINT {SAVEPOINT}")
            yield conn
            if joined:
                conn.execute(f"RELEASE {SAVEPOINT}")
        except BaseException as exc:
            self._failed(shared, joined, exc)
            if isinstance(exc, sqlite3.Error):
                raise translate(exc, self.path) from exc
            raise
        if share and self._sharers_waiting and shared.writes < MAX_SHARED:
            self._open_shared = shared  # the next hot write goes on in it and commits
            self._write_lock.release()
            self._wait_for_commit(shared)
        else:
            try:
                self._end(shared)
            finally:
                self._write_lock.release()
        if shared.failure is not None:
            raise self._shared_failure(shared)

    def _take_write_lock(self, share: bool) -> None:
        """The process's write lock, counting the hot writes that wait for it (a hot
        write that ends leaves its transaction open only while one does)."""
        if share:
            with self._lock:
                self._sharers_waiting += 1
        try:
            got = self._write_lock.acquire(timeout=self.busy_timeout)
        finally:
            if share:
                with self._lock:
                    self._sharers_waiting -= 1
        if not got:
            raise StoreBusy(f"SQLite database {self.path}: another thread held the write lock")

    def _transaction_for(self, share: bool) -> tuple[SharedCommit, bool]:
        """With the write lock held: the transaction a hot write left open, joined (True)
        by a hot write; else a new one, after committing any left open for its writes."""
        left, self._open_shared = self._open_shared, None
        if left is not None and left.open_to(os.getpid()):
            if share:
                try:  # checked like a transaction that begins: the file may have gone bad
                    self._check_file(left.identity)  # since the writes that left it began
                except BaseException:
                    self._end(left)
                    raise
                left.writes += 1
                return left, True
            self._end(left)
        conn = self.get()
        self._use_busy_handler(conn, False)
        self.wal.before_write(conn)
        try:
            self._begin_immediate(conn)
        except sqlite3.Error as exc:
            self._write_failed(exc)
            raise translate(exc, self.path) from None
        try:
            self._check_file(self._local.identity)
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise
        return SharedCommit(conn, self._local.identity), False

    def _failed(self, shared: SharedCommit, joined: bool, exc: BaseException) -> None:
        """A write's statements failed: undo them (all of the transaction for the write
        that began it; to its savepoint for one that joined, so the writes before it
        still commit), end the transaction and release the write lock."""
        conn = shared.conn
        if isinstance(exc, sqlite3.Error):
            self._write_failed(exc)
        try:
            if joined and conn.in_transaction:  # some errors (a full disk) end it: lost
                try:
                    conn.execute(f"ROLLBACK TO {SAVEPOINT}")
                    conn.execute(f"RELEASE {SAVEPOINT}")
                except sqlite3.Error as undo:
                    shared.failure = undo
            else:
                shared.failure = exc if isinstance(exc, sqlite3.Error) else _rolled_back()
            self._end(shared)
        finally:
            self._write_lock.release()

    def _write_failed(self, exc: BaseException) -> None:
        """SQLite refused a write: the WAL guard is told (a full disk), and a refusal as
        read-only, past `_check_file`'s look at a writable file, has every thread reopen
        its connection at its next use. One was opened read-only: the file was made
        read-only and writable again between SQLite's open and `_open`'s look after it."""
        self.wal.write_failed(exc)
        code = getattr(exc, "sqlite_errorcode", None)
        if isinstance(code, int) and code & 0xFF == sqlite3.SQLITE_READONLY:
            self._generation += 1

    def _end(self, shared: SharedCommit) -> None:
        """Commit the transaction (or roll it back, if it failed) and tell the writes
        that left it open. Raises only what the WAL guard's look after a commit raises."""
        conn = shared.conn
        try:
            if shared.failure is None:
                try:
                    conn.execute("COMMIT")
                except sqlite3.Error as exc:
                    self._write_failed(exc)
                    shared.failure = exc
            if shared.failure is not None:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
        finally:
            shared.done.set()
        if shared.failure is None:
            self.wal.after_commit(conn)

    def _wait_for_commit(self, shared: SharedCommit) -> None:
        """Wait until the transaction this write left open ends. Should the hot write
        that waited for the lock not take it (its wait timed out), commit it here."""
        while not shared.done.wait(PARKED_CHECK):
            if self._write_lock.acquire(blocking=False):
                try:
                    if self._open_shared is shared:
                        self._open_shared = None
                        self._end(shared)
                finally:
                    self._write_lock.release()

    def _shared_failure(self, shared: SharedCommit) -> Exception:
        """What a write raises whose statements did not commit because its transaction
        failed: a new exception for each write that shared it (each raises in its own
        thread); SQLite's own error, translated, for a write that shared it with none."""
        failure = shared.failure
        assert failure is not None
        error = translate(failure, self.path)
        if error is failure and shared.writes > 1:  # another write's constraint, perhaps
            return StoreUnavailable(f"SQLite database {self.path}: {failure}")
        return error

    @property
    def hot_writes_waiting(self) -> int:
        """How many hot writes wait for the process's write lock (tests wait on it)."""
        with self._lock:
            return self._sharers_waiting

    def _use_busy_handler(self, conn: sqlite3.Connection, on: bool) -> None:
        """SQLite's busy handler on (a read waits in it, up to the busy timeout) or off (a
        write's `BEGIN IMMEDIATE` waits in `_begin_immediate`'s own pauses instead). A
        PRAGMA only when the thread's connection changes from one to the other: a thread
        that only writes (a worker's heartbeat, its completer) pays one, once."""
        if self._local.busy_handler != on:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000) if on else 0}")
            self._local.busy_handler = on

    def _begin_immediate(self, conn: sqlite3.Connection) -> None:
        """`BEGIN IMMEDIATE` with SQLite's busy handler off (`_use_busy_handler`),
        waiting for another process's write lock here, in short pauses
        (`WRITE_LOCK_FIRST_PAUSE` doubling up to `WRITE_LOCK_MAX_PAUSE`), for at most the
        busy timeout, rather than in the handler, whose pauses grow to tens of
        milliseconds. Raises SQLite's busy error once the timeout is spent."""
        pause, deadline = WRITE_LOCK_FIRST_PAUSE, None
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY:  # or an extended one
                    raise
                now = time.monotonic()
                deadline = now + self.busy_timeout if deadline is None else deadline
                if now >= deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, WRITE_LOCK_MAX_PAUSE)

    @contextlib.contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """The thread's connection with SQLite's busy handler on for the read, and as it
        was after: a thread that writes keeps it off between its writes, so its writes
        pay no PRAGMA and each of its reads pays the same two."""
        conn = self.get()
        was = self._local.busy_handler
        try:
            self._use_busy_handler(conn, True)
            yield conn
        except sqlite3.Error as exc:
            raise translate(exc, self.path) from None
        finally:
            with contextlib.suppress(sqlite3.Error):
                self._use_busy_handler(conn, was)

    def close(self) -> None:
        with self._lock:
            conns = list(self._by_thread.values())
            self._by_thread.clear()
            self._local = threading.local()
        for conn in conns:
            with contextlib.suppress(sqlite3.Error):
                conn.close()


def _rolled_back() -> sqlite3.Error:
    """Why the writes of a transaction rolled back by a failure that is not SQLite's
    (an interrupt inside a write) did not commit."""
    return sqlite3.OperationalError("the write transaction was rolled back")


def _identity(path: Path) -> tuple[int, int]:
    """Which file `path` names now: (device, inode)."""
    stats = os.stat(path)
    return stats.st_dev, stats.st_ino
