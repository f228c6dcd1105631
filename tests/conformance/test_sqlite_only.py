"""SQLite-specific behaviour: where the database file lives and what can go wrong there.

Kept apart from the backend-neutral suite; it builds stores from sqlite:// URLs.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sqlite3  # also loaded before a child drops to `nobody`
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from heartq.errors import ConfigError, StoreBusy, StoreUnavailable
from heartq.model import DetectedBy, JobStatus, NewJob
from heartq.store import open_store
from heartq.store.sqlite.liveness import lock_dir
from tests.support import wait_for, without_dac_override

from .support import enqueue_one, register


def _error_opening(path: Path | str) -> StoreUnavailable:
    store = open_store(f"sqlite:///{path}")
    try:
        with pytest.raises(StoreUnavailable) as raised:
            store.link.migrate()
    finally:
        store.link.close()
    message = str(raised.value)
    assert "\n" not in message, "one line"
    assert str(path) in message, "names the file"
    return raised.value


def test_missing_directory(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "sub" / "heartq.db"
    message = str(_error_opening(path))
    assert f"directory {path.parent} does not exist" in message
    assert not path.parent.exists()


def test_parent_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    path = tmp_path / "a-file" / "heartq.db"
    message = str(_error_opening(path))
    assert f"{path.parent} is not a directory" in message


def test_database_path_is_a_directory(tmp_path: Path) -> None:
    (tmp_path / "heartq.db").mkdir()
    _error_opening(tmp_path / "heartq.db")


def test_directory_where_nobody_may_create_files() -> None:
    """procfs refuses new files even to root, which makes it a read-only directory that
    works whoever runs the tests."""
    _error_opening("/proc/self/heartq.db")


@pytest.fixture
def read_only_dir() -> Iterator[Path]:
    """A directory with mode 0o555 under /tmp (traversable by every user)."""
    folder = Path(tempfile.mkdtemp(prefix="heartq-ro-"))
    folder.chmod(0o555)
    yield folder
    folder.chmod(0o755)
    shutil.rmtree(folder)


def test_read_only_directory(read_only_dir: Path) -> None:
    """chmod 0o555 stops everyone but root, who may write anywhere. Run as root (as in
    containers), the open is done in a forked child that first drops to user `nobody`
    (65534), so the mode is enforced. What `nobody` may not be able to read is loaded
    before it drops: forking keeps the modules already imported (`sqlite3` among them:
    a Python installed under /root is unreadable to `nobody`), and the store's migration
    scripts are read first (a checkout under a directory only root may enter, as
    `mktemp -d` makes, is unreadable to `nobody` too)."""
    path = read_only_dir / "heartq.db"
    if os.geteuid() != 0:
        message = str(_error_opening(path))
    else:
        store = open_store(f"sqlite:///{path}")
        scripts = store.dialect.migrations()  # type: ignore[attr-defined]
        store.dialect.migrations = lambda: scripts  # type: ignore[attr-defined]
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            code = 1
            try:
                os.close(read)
                os.setgid(65534)
                os.setuid(65534)
                try:
                    store.link.migrate()
                    text = "no error"
                except StoreUnavailable as exc:
                    text = f"StoreUnavailable: {exc}"
                    code = 0
                except Exception as exc:  # noqa: BLE001 - reported to the parent
                    text = f"{type(exc).__name__}: {exc}"
                os.write(write, text.encode())
            finally:
                os._exit(code)
        os.close(write)
        with os.fdopen(read, "rb") as pipe:
            text = pipe.read().decode()
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, text
        assert text.startswith("StoreUnavailable: ")
        message = text.removeprefix("StoreUnavailable: ")
        assert "\n" not in message and str(path) in message
    assert "not writable" in message
    assert not path.exists()


MADE_READ_ONLY_AS_IT_OPENS = textwrap.dedent(
    """
    import sys, threading
    from pathlib import Path
    from heartq.errors import StoreUnavailable
    from heartq.store.sqlite.connection import ConnectionPool

    path, at_once = Path(sys.argv[1]), sys.argv[2] == "at_once"
    pool = ConnectionPool(path)
    with pool.write() as conn:
        conn.execute("CREATE TABLE rows (n INTEGER)")
    connect = pool._connect

    def made_read_only_meanwhile(mode, cached_statements=128):
        path.chmod(0o444)  # after the pool looked at the file, before SQLite opens it
        try:
            return connect(mode, cached_statements)
        finally:
            if at_once:  # and writable again before the pool looks at it once more
                path.chmod(0o644)

    def writes():  # a thread's first writes, the first one opening its connection
        for n in range(3):
            try:
                with pool.write() as conn:
                    conn.execute("INSERT INTO rows (n) VALUES (?)", (n,))
                print("landed")
            except StoreUnavailable as exc:
                print(exc.reason)
            pool._connect = connect
            path.chmod(0o644)

    pool._connect = made_read_only_meanwhile
    thread = threading.Thread(target=writes)
    thread.start()
    thread.join()
    """
)


@pytest.mark.parametrize("writable_again", ["after", "at_once"])
def test_a_file_made_read_only_as_a_thread_opens_it_is_written_once_writable(
    tmp_path: Path, writable_again: str
) -> None:
    """SQLite opens a file it may not write read-only, without a word; a connection kept
    so refused every write of its thread long after the file was writable again, and a
    worker logged `store_unavailable` at each of that thread's passes, `store_recovered`
    at each landing of the others'. The file is made read-only between the pool's look
    at it and SQLite's open, and writable again after the write (the look after the
    open refuses the connection) or at once, before that look (SQLite refuses the
    write, and the connection is reopened): either way the next write lands. Run as
    root, the process runs without the capabilities that let root ignore file modes."""
    launcher = without_dac_override() if os.geteuid() == 0 else []
    script = [sys.executable, "-c", MADE_READ_ONLY_AS_IT_OPENS, str(tmp_path / "q.db")]
    done = subprocess.run(
        [*launcher, *script, writable_again], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["read_only", "landed", "landed"]


@pytest.mark.parametrize(
    ("query", "level"),
    [("", 2), ("?synchronous=normal", 1), ("?synchronous=FULL", 2), ("?busy_timeout=5", 2)],
)
def test_synchronous_from_the_url_on_every_connection(
    tmp_path: Path, query: str, level: int
) -> None:
    """FULL (2) unless the URL asks for NORMAL (1), on every thread's connection."""
    store = open_store(f"sqlite:///{tmp_path / 'q.db'}{query}")
    try:
        store.link.migrate()
        seen = [store.link.pool.get().execute("PRAGMA synchronous").fetchone()[0]]  # type: ignore[attr-defined]
        other = threading.Thread(
            target=lambda: seen.append(
                store.link.pool.get().execute("PRAGMA synchronous").fetchone()[0]  # type: ignore[attr-defined]
            )
        )
        other.start()
        other.join()
    finally:
        store.link.close()
    assert seen == [level, level]


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("?synchronous=off", "synchronous must be full or normal, got 'off'"),
        ("?synchronous=extra", "synchronous must be full or normal, got 'extra'"),
        ("?synchronous=", "synchronous must be full or normal, got ''"),
        ("?fsync=0", "unknown SQLite URL option 'fsync' (known: busy_timeout, synchronous)"),
        ("?busy_timeout=nan", "busy_timeout must be finite and not negative, got 'nan'"),
    ],
)
def test_a_bad_url_option_is_one_clear_line(tmp_path: Path, query: str, says: str) -> None:
    path = tmp_path / "q.db"
    with pytest.raises(ConfigError) as raised:
        open_store(f"sqlite:///{path}{query}")
    assert says in str(raised.value)
    assert "\n" not in str(raised.value)
    assert not path.exists(), "nothing opened, nothing created"


CRASHING_ENQUEUER = textwrap.dedent(
    """
    import os, signal, sys
    import heartq

    app = heartq.App(sys.argv[1])
    app.migrate()
    for _ in range(int(sys.argv[2])):
        print(app.enqueue("noop"), flush=True)  # acknowledged: the caller has the id
    os.kill(os.getpid(), signal.SIGKILL)  # no close, no checkpoint, no atexit
    """
)


@pytest.mark.parametrize("query", ["", "?synchronous=normal"])
def test_an_acknowledged_enqueue_survives_a_process_crash(tmp_path: Path, query: str) -> None:
    """At `synchronous=normal` too: a commit is in the file (the OS's cache) before
    `enqueue` returns, so a SIGKILLed process loses no job it was told was stored. (A
    power loss is another matter at `normal`: docs/OPERATIONS.md.)"""
    url = f"sqlite:///{tmp_path / 'q.db'}{query}"
    done = subprocess.run(
        [sys.executable, "-c", CRASHING_ENQUEUER, url, "200"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    acknowledged = done.stdout.split()
    assert len(acknowledged) == 200
    store = open_store(url)
    try:
        for job_id in acknowledged:
            assert store.get_job(job_id)["status"] == "queued", job_id
    finally:
        store.link.close()


def _locked_by_another_connection(path: Path) -> sqlite3.Connection:
    """A plain connection holding `path`'s write lock, as another process's would."""
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    return other


def test_a_writer_waits_out_another_process_write_lock_in_short_pauses(tmp_path: Path) -> None:
    """Another process's write lock is waited out by heartq's own tries a few pauses
    apart (`WRITE_LOCK_MAX_PAUSE` at most), not inside SQLite's busy handler, whose pauses
    grow to tens of milliseconds: the write lands once the lock is free, and a read on
    the same connection waits in the busy handler, for the busy timeout, as before."""
    path = tmp_path / "q.db"
    store = open_store(f"sqlite:///{path}?busy_timeout=20")
    try:
        store.link.migrate()
        begins: list[str] = []
        store.link.pool.trace.append(lambda sql: begins.append(sql) if "BEGIN" in sql else None)
        store.link.pool.enable_trace()
        other = _locked_by_another_connection(path)

        def free_after_three_tries() -> None:
            try:
                wait_for(lambda: len(begins) >= 3, timeout=15, what="three tries for the lock")
            finally:
                other.execute("COMMIT")
                other.close()

        freer = threading.Thread(target=free_after_three_tries)
        freer.start()
        (job_id,) = store.enqueue([NewJob(task="t", args_json="{}")])
        freer.join()
        assert len(begins) >= 3, begins
        assert store.get_job(job_id)["status"] == "queued"
        with store.link.pool.read() as conn:  # a read waits in SQLite's busy handler again
            assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 20_000
    finally:
        store.link.close()


def test_a_writer_gives_up_after_its_busy_timeout(tmp_path: Path) -> None:
    """Waited out in heartq's own pauses, the busy timeout still holds: a write behind a
    lock that never frees fails with `StoreBusy` once the timeout is spent, writing
    nothing, and a read waits in SQLite's busy handler again."""
    path = tmp_path / "q.db"
    store = open_store(f"sqlite:///{path}?busy_timeout=0.3")
    try:
        store.link.migrate()
        other = _locked_by_another_connection(path)
        started = time.monotonic()
        with pytest.raises(StoreBusy, match="locked by another process"):
            store.enqueue([NewJob(task="t", args_json="{}")])
        assert time.monotonic() - started >= 0.3
        other.execute("ROLLBACK")
        other.close()
        with store.link.pool.read() as conn:
            assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 300
        assert store.list_jobs() == []
    finally:
        store.link.close()


def test_the_probe_reclaims_a_dead_workers_jobs_and_removes_its_lock_file(tmp_path: Path) -> None:
    """A worker whose process died (SIGKILL: the kernel freed its lock file, the file
    stays) is found by the liveness probe, its job queued again in the probe's
    transaction, and its lock file removed once that committed, so the lock files do
    not pile up with every gone worker; a live worker keeps its job and its lock file."""
    path = tmp_path / "q.db"
    store = open_store(f"sqlite:///{path}")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from pathlib import Path\n"
            "from heartq.store.sqlite.liveness import FileLivenessLock\n"
            f"FileLivenessLock(Path({str(path)!r}), 'dead')\n"
            "print('held', flush=True)\n"
            "time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        store.link.migrate()
        t0 = store.clock()
        here = socket.gethostname()  # a lock file is judged on its own host only
        register(store, "dead", t0, hostname=here)
        register(store, "live", t0, hostname=here)
        enqueue_one(store, t0)
        enqueue_one(store, t0)
        (gone,) = store.claim("dead", ["default"], 1, 600, now=t0)
        (kept,) = store.claim("live", ["default"], 1, 600, now=t0)
        live = store.link.liveness_hold("live")
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert store.liveness_probe(DetectedBy.LIVENESS_LOCK, now=t0 + 1) == []  # held

        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        (found,) = store.liveness_probe(DetectedBy.LIVENESS_LOCK, now=t0 + 2)

        assert found.id == "dead"
        assert [r.job_id for r in found.reclaimed] == [gone.id]
        assert store.get_job(gone.id)["status"] == JobStatus.QUEUED
        assert store.get_job(kept.id)["status"] == JobStatus.RUNNING
        assert sorted(p.name for p in lock_dir(path).iterdir()) == ["live.lock"]
        live.close()
    finally:
        holder.kill()
        holder.wait(10)
        store.link.close()
