"""SQLite: hot writes of two threads that meet at the write lock share one commit
(`SharedCommit` in `store/sqlite/connection.py`), and each still commits or fails as a
whole.

Each test runs a first hot write that holds the lock until a second one waits for it,
on a real file, and reads the outcome through a connection of its own."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from heartq.errors import DuplicateJob, StoreUnavailable
from heartq.model import NewJob
from heartq.store import open_store
from heartq.store.sqlite.connection import SHARED_ENQUEUE_JOBS, ConnectionPool
from heartq.store.sqlite.store import SQLiteStore
from tests.support import wait_for

Write = Callable[[sqlite3.Connection], None]


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[ConnectionPool]:
    pool = ConnectionPool(tmp_path / "q.db")
    with pool.write() as conn:
        conn.execute("CREATE TABLE rows (name TEXT PRIMARY KEY)")
    yield pool
    pool.close()


def _insert(name: str) -> Write:
    def write(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO rows (name) VALUES (?)", (name,))

    return write


def _names(pool: ConnectionPool) -> set[str]:
    with sqlite3.connect(pool.path) as conn:
        return {name for (name,) in conn.execute("SELECT name FROM rows")}


class _Thread(threading.Thread):
    """A hot write in a thread of its own: what it raised, if anything."""

    def __init__(
        self, pool: ConnectionPool, write: Write, share: bool = True, prepare: Write | None = None
    ) -> None:
        super().__init__(daemon=True)
        self.pool, self.write, self.share, self.prepare = pool, write, share, prepare
        self.raised: BaseException | None = None
        self.returned = threading.Event()

    def run(self) -> None:
        try:
            if self.prepare is not None:  # on this thread's own connection
                self.prepare(self.pool.get())
            with self.pool.write(share=self.share) as conn:
                self.write(conn)
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            self.raised = exc
        self.returned.set()


def _meet(
    pool: ConnectionPool, first: Write, second: Write, prepare: Write | None = None
) -> tuple[_Thread, _Thread]:
    """Run `first` as a hot write that ends only once `second`, a hot write of another
    thread, waits for the lock; return both threads, ended. `prepare` runs first on each
    thread's own connection."""
    second_thread = _Thread(pool, second, prepare=prepare)

    def first_then_wait(conn: sqlite3.Connection) -> None:
        first(conn)
        second_thread.start()
        wait_for(lambda: pool.hot_writes_waiting == 1, timeout=10, what="the second write")

    first_thread = _Thread(pool, first_then_wait, prepare=prepare)
    first_thread.start()
    for thread in (first_thread, second_thread):
        thread.join(timeout=30)
        assert not thread.is_alive(), "a write never returned"
    return first_thread, second_thread


def _commits(pool: ConnectionPool) -> list[str]:
    seen: list[str] = []
    pool.trace.append(lambda sql: seen.append(sql) if sql.strip() == "COMMIT" else None)
    pool.enable_trace()
    return seen


def test_two_hot_writes_share_one_commit(pool: ConnectionPool) -> None:
    commits = _commits(pool)
    first, second = _meet(pool, _insert("a"), _insert("b"))
    assert first.raised is None and second.raised is None
    assert _names(pool) == {"a", "b"}
    assert len(commits) == 1, commits


def test_the_first_write_returns_only_once_its_rows_are_committed(pool: ConnectionPool) -> None:
    seen_by_second: list[set[str]] = []

    def second(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO rows (name) VALUES ('b')")
        seen_by_second.append(_names(pool))  # another connection: committed rows only

    first, _ = _meet(pool, _insert("a"), second)
    assert first.raised is None
    assert seen_by_second == [set()], "the first write's row was not committed before"
    assert _names(pool) == {"a", "b"}


def test_a_failed_second_write_undoes_only_its_own_statements(pool: ConnectionPool) -> None:
    def second(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO rows (name) VALUES ('b')")
        raise ValueError("the second write's own failure")

    first, failed = _meet(pool, _insert("a"), second)
    assert first.raised is None
    assert isinstance(failed.raised, ValueError)
    assert _names(pool) == {"a"}


def test_a_constraint_in_the_second_write_is_its_own(pool: ConnectionPool) -> None:
    first, failed = _meet(pool, _insert("a"), _insert("a"))
    assert first.raised is None
    assert isinstance(failed.raised, sqlite3.IntegrityError)
    assert _names(pool) == {"a"}


def test_a_commit_that_fails_fails_every_write_that_shared_it(pool: ConnectionPool) -> None:
    with pool.write() as conn:  # a violation SQLite reports only at COMMIT
        conn.execute("CREATE TABLE parents (id INTEGER PRIMARY KEY)")
        conn.execute(
            "CREATE TABLE children (parent INTEGER REFERENCES parents (id)"
            " DEFERRABLE INITIALLY DEFERRED)"
        )

    def orphan(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO children (parent) VALUES (42)")

    keys_checked: Write = lambda conn: conn.execute("PRAGMA foreign_keys = ON")  # noqa: E731
    first, second = _meet(pool, _insert("a"), orphan, prepare=keys_checked)
    assert isinstance(first.raised, StoreUnavailable), first.raised
    assert "FOREIGN KEY" in str(first.raised) and "\n" not in str(first.raised)
    assert isinstance(second.raised, StoreUnavailable), second.raised
    assert _names(pool) == set(), "nothing of either write was committed"
    with pool.write() as conn:  # and the pool writes on
        conn.execute("INSERT INTO rows (name) VALUES ('after')")
    assert _names(pool) == {"after"}


def test_a_write_that_joins_checks_the_file_as_one_that_begins(pool: ConnectionPool) -> None:
    """A transaction left open before the file went bad was checked when it began; a
    write joining it later is checked again, or it would land through a descriptor of a
    file that is gone (or read-only) and tell the worker the database came back."""
    def first_then_delete(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO rows (name) VALUES ('a')")
        pool.path.unlink()

    first, second = _meet(pool, first_then_delete, _insert("b"))
    assert first.raised is None, first.raised  # begun while the file was there
    assert isinstance(second.raised, StoreUnavailable), second.raised
    assert second.raised.reason == "file_gone"


def test_a_write_that_does_not_share_never_joins(pool: ConnectionPool) -> None:
    """An enqueue, say, meeting a transaction a hot write left open commits that one for
    its writes, then writes in a transaction of its own."""
    commits = _commits(pool)
    with _a_hot_write_waiting(pool):
        first = _Thread(pool, _insert("a"))
        first.start()
        wait_for(lambda: pool._open_shared, timeout=10, what="a transaction left open")
        with pool.write() as conn:
            conn.execute("INSERT INTO rows (name) VALUES ('b')")
        assert first.returned.wait(timeout=30)
    assert first.raised is None
    assert _names(pool) == {"a", "b"}
    assert len(commits) == 2, commits


@contextlib.contextmanager
def _a_hot_write_waiting(pool: ConnectionPool) -> Iterator[None]:
    """As if a hot write waited for the lock and never took it."""
    with pool._lock:  # the test's own pool: a waiter that never comes
        pool._sharers_waiting += 1
    try:
        yield
    finally:
        with pool._lock:
            pool._sharers_waiting -= 1


def test_a_write_left_open_for_a_waiter_that_gave_up_commits_by_itself(
    pool: ConnectionPool,
) -> None:
    """A hot write that ends while another waits leaves its transaction open for it; if
    that one never comes (its wait timed out just then), the first commits it itself."""
    commits = _commits(pool)
    with _a_hot_write_waiting(pool):
        write = _Thread(pool, _insert("a"))
        write.start()
        assert write.returned.wait(timeout=30), "the write waited for ever"
    assert write.raised is None
    assert _names(pool) == {"a"}
    assert len(commits) == 1


# -- enqueues (SQLiteStore._write_enqueue) ----------------------------------------------


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = open_store(f"sqlite:///{tmp_path / 'jobs.db'}")
    assert isinstance(store, SQLiteStore)
    store.link.migrate()
    with store.link.pool.write() as conn:
        conn.execute("CREATE TABLE rows (name TEXT PRIMARY KEY)")
    yield store
    store.link.close()


def _enqueue(store: SQLiteStore, *jobs: NewJob) -> Write:
    """An enqueue as a `_meet` step: the store takes the pool's write lock itself."""

    def enqueue(conn: sqlite3.Connection) -> None:
        store.enqueue(list(jobs))

    return enqueue


def _job(job_id: str | None = None) -> NewJob:
    return NewJob(task="t", args_json="{}", id=job_id)


class _Outside(_Thread):
    """A step that takes the pool's write lock itself (an enqueue), not inside one."""

    def run(self) -> None:
        try:
            self.write(self.pool.get())
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            self.raised = exc
        self.returned.set()


def _meet_enqueue(store: SQLiteStore, first: Write, enqueue: Write) -> tuple[_Thread, _Thread]:
    """`_meet` with an enqueue as the second write: the first, a hot write, ends only once
    the enqueue waits for the lock as a write that may share."""
    pool = store.link.pool
    second = _Outside(pool, enqueue)

    def first_then_wait(conn: sqlite3.Connection) -> None:
        first(conn)
        second.start()
        wait_for(lambda: pool.hot_writes_waiting == 1, timeout=10, what="the enqueue to wait")

    first_thread = _Thread(pool, first_then_wait)
    first_thread.start()
    for thread in (first_thread, second):
        thread.join(timeout=30)
        assert not thread.is_alive(), "a write never returned"
    return first_thread, second


def test_a_small_enqueue_shares_the_commit_of_a_hot_write(sqlite_store: SQLiteStore) -> None:
    commits = _commits(sqlite_store.link.pool)
    job_id = "0190d2a4-0000-7000-8000-000000000001"
    first, enqueue = _meet_enqueue(sqlite_store, _insert("a"), _enqueue(sqlite_store, _job(job_id)))
    assert first.raised is None and enqueue.raised is None
    assert _names(sqlite_store.link.pool) == {"a"}
    assert sqlite_store.get_job(job_id)["status"] == "queued"
    assert len(commits) == 1, commits


def test_a_duplicate_enqueue_that_shared_fails_alone(sqlite_store: SQLiteStore) -> None:
    job_id = "0190d2a4-0000-7000-8000-000000000002"
    sqlite_store.enqueue([_job(job_id)])
    first, enqueue = _meet_enqueue(sqlite_store, _insert("a"), _enqueue(sqlite_store, _job(job_id)))
    assert first.raised is None
    assert isinstance(enqueue.raised, DuplicateJob), enqueue.raised
    assert _names(sqlite_store.link.pool) == {"a"}
    assert len(sqlite_store.list_jobs()) == 1


def test_a_large_enqueue_never_joins(sqlite_store: SQLiteStore) -> None:
    """A batch above SHARED_ENQUEUE_JOBS meeting a transaction a hot write left open
    commits that one first, then its own."""
    pool = sqlite_store.link.pool
    commits = _commits(pool)
    with _a_hot_write_waiting(pool):
        first = _Thread(pool, _insert("a"))
        first.start()
        wait_for(lambda: pool._open_shared, timeout=10, what="a transaction left open")
        sqlite_store.enqueue([_job() for _ in range(SHARED_ENQUEUE_JOBS + 1)])
        assert first.returned.wait(timeout=30)
    assert first.raised is None
    assert _names(pool) == {"a"}
    assert len(sqlite_store.list_jobs(limit=1000)) == SHARED_ENQUEUE_JOBS + 1
    assert len(commits) == 2, commits
