"""PostgreSQL for the tests: the shared server when it answers, else a private cluster.

Order: `HEARTQ_TEST_PG_URL` if set; else the machine's server at 127.0.0.1:5432
(database `test`, user `postgres`); else a private cluster (`PrivateCluster`: initdb and
`pg_ctl` on a free port in a temporary directory, removed afterwards; the code is
`bench/servers/postgres.py`'s, which the benchmarks share). Tests never silently skip
PostgreSQL: if none of these works, they fail with the reason.

Each run makes a database of its own on that server (`hqt_<run token>`, `pg_server_url`),
and each test its own schema there (`?schema=hqt_<run token>_<random>`), dropped after
the test; the run's end drops the database. A database of its own, because migrations
take an advisory lock of the database (one migration at a time per database, by design):
in a database shared with other runs (other clones' suites on the machine's server),
every fresh schema of every run waited in one queue for it. Where the role may not
create databases, the schemas go in the given database itself. Tests that want a
migrated schema take one that `SchemaStock` migrated ahead of them, and it drops them
behind. Tests that must stop or kill a database use `PrivateCluster` directly, never the
shared server.

Databases and schemas outlive a killed run (SIGKILL, power loss), so each carries its
run's token (`tests/leftovers.py` names runs), and every process that makes them holds a
shared advisory lock on that token, in the database it connects to first, in a session of
its own for as long as it lives. A run starting sweeps the databases and schemas whose
lock no session holds (their makers are gone); those of a run still going, on this
machine or another using the same server, are never touched. Schemas of another naming
(an older checkout's `t_<random>`) are left alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, LiteralString
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from bench.servers import postgres
from heartq.store.sql.base import migration_scripts
from tests import leftovers, pg_template

SHARED_URL = os.environ.get(
    "HEARTQ_TEST_PG_SHARED_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
"""Where the machine's own server is looked for (point it at a dead port to exercise the
private-cluster path, as on a machine with no PostgreSQL)."""
SCHEMA_PREFIX = "hqt_"
LOCK_SPACE = 0x68717431
"""The first key of the runs' advisory locks (the second is the run's token), so that
they never meet an application's."""
_RUN_SCHEMA = re.compile(rf"^{SCHEMA_PREFIX}([0-9a-f]{{8}})_[0-9a-f]{{12}}$")
_RUN_DATABASE = re.compile(rf"^{SCHEMA_PREFIX}([0-9a-f]{{8}})$")
DROP_LOCK_TIMEOUT = "5s"
"""How long a sweep waits for a schema's locks (a dying session's) before it leaves the
schema to the next sweep."""


def answers(url: str) -> bool:
    """Whether a server answers at `url` (within 2 s)."""
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


class PrivateCluster(postgres.PrivateCluster):
    """`bench/servers/postgres.py`'s cluster, its data under the run's scratch directory
    (`tests/leftovers.py`), so that the next run removes it if this one was killed.

    Its data directory is a copy of the run's template, made by the first `initdb` of the
    run (under a lock its processes share): a copy takes 0.1 s where initdb took 1-2 s, for
    each of the dozen clusters of a default run. The copies share initdb's system
    identifier (as a standby shares its primary's); nothing else tells them apart from a
    cluster initdb made."""

    def scratch(self) -> Path:
        return leftovers.scratch_dir()

    def init_data(self) -> None:
        template = self.scratch() / "pg-template"
        with open(self.scratch() / "pg-template.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # let go with the file, or when its holder dies
            if not (template / "data" / "PG_VERSION").exists():
                shutil.rmtree(template, ignore_errors=True)  # a half-made one
                template.mkdir(mode=0o755)
                if self.prefix:
                    shutil.chown(template, user=self.prefix[2])
                self.initdb(template / "data")
        # cp -a as the cluster's user: its files stay its own, the directory's mode 0700
        subprocess.run([*self.prefix, "cp", "-a", str(template / "data"), str(self.data)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip


def _given_url() -> str | None:
    """The server tests use when one is there (the override, else the shared one), without
    starting a private cluster."""
    override = os.environ.get("HEARTQ_TEST_PG_URL")
    if override:
        return override
    return SHARED_URL if answers(SHARED_URL) else None


@contextlib.contextmanager
def server_url() -> Iterator[str]:
    """The URL of a PostgreSQL server tests may create schemas in."""
    given = _given_url()
    if given:
        yield given
        return
    cluster = PrivateCluster()
    try:
        deadline = time.monotonic() + 30
        while not answers(cluster.url):
            if time.monotonic() > deadline:
                raise RuntimeError("the private PostgreSQL cluster did not start")
            time.sleep(0.1)
        yield cluster.url
    finally:
        cluster.close()


def run_token(run: leftovers.RunId) -> int:
    """A run's token: the second key of its advisory lock, in hex in its schemas' names."""
    return zlib.crc32(str(run).encode()) & 0x7FFFFFFF


_owner_sessions: dict[str, psycopg.Connection[Any]] = {}
"""Per server: this process's session holding its run's lock (closed when it exits)."""
_owner_sessions_lock = threading.Lock()


def _hold_run_lock(base: str, token: int) -> None:
    """Hold the run's lock on `base` for as long as this process lives (shared: every
    process of the run holds it; a sweep takes it exclusively only when none does)."""
    with _owner_sessions_lock:
        if base in _owner_sessions and not _owner_sessions[base].closed:
            return
        conn = psycopg.connect(base, autocommit=True, application_name="heartq-tests run")
        conn.execute("SELECT pg_advisory_lock_shared(%s, %s)", (LOCK_SPACE, token))
        _owner_sessions[base] = conn


def _new_schema_url(base: str) -> str:
    """The URL of a schema on `base` no test has used, marked with this run's token (not
    made yet: a migration or a test makes it)."""
    token = run_token(leftovers.this_run())
    _hold_run_lock(base, token)
    return f"{base}?schema={SCHEMA_PREFIX}{token:08x}_{uuid.uuid4().hex[:12]}"


def _drop_schema_of(url: str) -> None:
    base, schema = url.rsplit("?schema=", 1)
    with psycopg.connect(base, autocommit=True) as conn:
        _drop(conn, [schema])


@contextlib.contextmanager
def schema_url(base: str) -> Iterator[str]:
    """A fresh schema on `base`, marked with this run's token, dropped afterwards."""
    url = _new_schema_url(base)
    try:
        yield url
    finally:
        _drop_schema_of(url)


class SchemaStock:
    """Migrated schemas made ahead of the tests that take them, and the schemas of tests
    that ended dropped behind them, by a thread of this process: a test then waits neither
    for its migration (0.05-0.2 s, seconds when other suites' DDL loads the server) nor
    for its schema's drop. Each schema is fresh as ever, for one test, never handed out
    again: a copy of one that the migrations made (`tests/pg_template.py`: a quarter of a
    migration's cost), or, where no copy can be made, made by a migration of its own.

    `take()` returns one (made on the spot if none is ready: the thread is behind, or
    could not make one, whose error the test then meets); `drop_behind(url)` once its
    test is done. `close()` drops what is left. Schemas left by a process that died go
    with its run's database (or a later sweep)."""

    def __init__(self, base: str, ahead: int = 2) -> None:
        self.base = base
        self.ahead = ahead
        self._ready: list[str] = []
        self._doomed: list[str] = []
        self._changed = threading.Condition()
        self._closing = False
        self._failed = False  # the thread's last migration failed: the tests make theirs
        self._template: pg_template.Template | None = None
        self._templated = False  # the template was tried: made, or none can be
        self._templating = threading.Lock()
        self._template_url: str | None = None
        self._scripts = migration_scripts("heartq.store.postgres")
        self._thread = threading.Thread(
            target=self._run, name="heartq-tests schemas", daemon=True
        )
        self._thread.start()

    def take(self) -> str:
        with self._changed:
            if self._ready:
                url = self._ready.pop(0)
                self._changed.notify_all()
                return url
        return self._make()

    def ready(self) -> list[str]:
        """The schemas made ahead, not taken yet."""
        with self._changed:
            return list(self._ready)

    def drop_behind(self, url: str) -> None:
        with self._changed:
            self._doomed.append(url)
            self._changed.notify_all()

    def close(self) -> None:
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        self._thread.join(60)
        with self._changed:
            left, self._ready, self._doomed = [*self._ready, *self._doomed], [], []
        with self._templating:
            left += [self._template_url] if self._template_url else []
        for url in left:
            with contextlib.suppress(psycopg.Error):
                _drop_schema_of(url)

    def _make(self) -> str:
        """A new migrated schema: a copy of this process's template (`tests/pg_template.py`),
        made by a migration first; migrated itself where no template can be made."""
        with self._templating:  # the thread's and a test's `take()`: one template
            if not self._templated:
                url = self._migrate()
                self._template = pg_template.Template.made(url, self._scripts)
                self._templated = True
                if self._template is None:
                    return url  # the first of the schemas each migrated
                self._template_url = url  # never handed out; dropped by `close()`
        if self._template is None:
            return self._migrate()
        url = _new_schema_url(self.base)
        self._template.copy(url)
        return url

    def _migrate(self) -> str:
        from heartq.store import open_store

        url = _new_schema_url(self.base)
        store = open_store(url)
        # every migration, whatever a test running meanwhile made the class return
        every = self._scripts
        store.dialect.migrations = lambda: every  # type: ignore[attr-defined]
        try:
            store.link.migrate()
        finally:
            store.link.close()
        return url

    def _next(self) -> tuple[str, str | None] | None:
        """What the thread does next: ("make", None) or ("drop", url); None to stop."""
        with self._changed:
            while True:
                if self._closing:
                    return None
                if len(self._ready) < self.ahead and not self._failed:
                    return "make", None
                if self._doomed:
                    return "drop", self._doomed.pop(0)
                self._changed.wait()

    def _run(self) -> None:
        while (job := self._next()) is not None:
            what, url = job
            try:
                if url is not None:
                    _drop_schema_of(url)
                    continue
                made = self._make()
            except Exception:  # noqa: BLE001 - the tests make their own and meet the error
                with self._changed:
                    self._failed = what == "make"
                continue
            with self._changed:
                self._ready.append(made)


class EmptiedSchema:
    """One migrated schema, handed out again and again, each time as its migration left
    it (`empty()`): for a test that wants an empty queue many times over (hypothesis:
    one per example), where a schema of its own each time would cost a migration and a
    drop (0.1-0.5 s of DDL on the server each, under load).

    What "as its migration left it" takes, and where each is put back:
    - the rows: every table of the schema, as the catalog lists it (a table a later
      migration adds is emptied too), is emptied, and the rows the migration wrote
      (`schema_migrations`, the `deployment` id) are written back, as they were read when
      the schema was first handed out. By DELETE, not TRUNCATE: TRUNCATE makes new files
      for every table and index, 0.03 s on an idle machine but 0.2-0.3 s under load,
      nearly a migration's cost; a DELETE of a few dozen rows is 0.02 s under that load;
    - the sequences: every sequence of the schema (owned by a column or not) is set back
      to where the migration left it;
    - sessions' state (session advisory locks such as workers' liveness locks, LISTENs,
      prepared statements, a pending notification): it lives in a session, not in the
      schema, and goes with it; the test closes every store on the schema before
      `empty()`, and this class's own session holds none of it (it only deletes, writes
      and reads, in transactions).
    All of it commits at once: no session sees the schema half emptied. `contents()`
    reads every table and sequence (tests/harness/test_schemas.py compares)."""

    def __init__(self, url: str) -> None:
        self.url = url
        base, self.schema = url.rsplit("?schema=", 1)
        self._conn = psycopg.connect(base, autocommit=True, application_name="heartq-tests empty")
        self._tables = self._names(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relkind IN ('r', 'p') ORDER BY c.relname"
        )
        self._sequences = self._names(
            "SELECT sequencename FROM pg_sequences WHERE schemaname = %s ORDER BY sequencename"
        )
        self.migrated = self.contents()
        """What the migration left: every table's rows and every sequence's position."""

    def _names(self, query: LiteralString) -> list[str]:
        """The names `query` lists from the catalog for this schema (its one parameter)."""
        return [name for (name,) in self._conn.execute(query, (self.schema,))]

    def _name(self, name: str) -> sql.Composed:
        return sql.SQL("{}.{}").format(sql.Identifier(self.schema), sql.Identifier(name))

    def contents(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every table's rows (in a stable order), and every sequence's `(last_value,
        is_called)`, by name."""
        found: dict[str, list[tuple[Any, ...]]] = {}
        for table in self._tables:
            rows = self._conn.execute(sql.SQL("SELECT * FROM {}").format(self._name(table)))
            found[table] = sorted(rows.fetchall(), key=repr)
        for sequence in self._sequences:
            row = self._conn.execute(
                sql.SQL("SELECT last_value, is_called FROM {}").format(self._name(sequence))
            ).fetchone()
            found[f"sequence {sequence}"] = [tuple(row or ())]
        return found

    def empty(self) -> str:
        """Put the schema back as its migration left it; returns its URL."""
        with self._conn.transaction():
            for table in self._tables:
                self._conn.execute(sql.SQL("DELETE FROM {}").format(self._name(table)))
                rows = self.migrated[table]
                if rows:
                    marks = sql.SQL(", ").join(sql.Placeholder() * len(rows[0]))
                    insert = sql.SQL("INSERT INTO {} VALUES ({})").format(self._name(table), marks)
                    self._conn.cursor().executemany(insert, rows)
            for sequence in self._sequences:
                ((last_value, is_called),) = self.migrated[f"sequence {sequence}"]
                self._conn.execute(
                    "SELECT setval(%s, %s, %s)",
                    (self._name(sequence).as_string(self._conn), last_value, is_called),
                )
        return self.url

    def close(self) -> None:
        self._conn.close()


def run_database(run: leftovers.RunId) -> str:
    """The name of `run`'s database on a test server."""
    return f"{SCHEMA_PREFIX}{run_token(run):08x}"


def in_database(url: str, name: str) -> str:
    """`url` (a server's URL) naming its database `name` instead."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def run_database_url(server: str) -> str:
    """The URL of this run's database on `server` (the URL of one of its databases),
    made by the first process of the run that asks for it; `server` itself where the role
    may not create databases. The run's end drops it (`drop_run_database`).

    Its sessions commit without waiting for the WAL to reach the disk (the database's
    own `synchronous_commit = off`; the server's settings are untouched): what a commit
    makes visible to other sessions is the same, only a crash of the server could lose
    the last commits, and no test crashes the shared server (those that stop or kill one
    use a private cluster, at its own settings). 1.2-1.7 ms less per writing commit on
    this project's VM, more while other runs write; the stateful protocol test alone
    writes thousands of times."""
    token = run_token(leftovers.this_run())
    _hold_run_lock(server, token)  # before it exists: a sweep must never take it
    name = run_database(leftovers.this_run())
    with psycopg.connect(server, autocommit=True, connect_timeout=5) as conn:
        try:  # template0: no session is ever in it (template1 may have some)
            conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(
                sql.Identifier(name)))  # fmt: skip
        except (psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation):
            pass  # another process of the run made it (at the same time: the catalog's
            # unique index refused this one once the other CREATE had committed)
        except psycopg.errors.InsufficientPrivilege:
            return server
        else:  # its sessions commit without waiting for the disk (above)
            conn.execute(sql.SQL("ALTER DATABASE {} SET synchronous_commit = off").format(
                sql.Identifier(name)))  # fmt: skip
    return in_database(server, name)


def _drop(conn: psycopg.Connection[Any], schemas: list[str]) -> list[str]:
    """Drop `schemas`; returns those dropped (one whose locks stay held is left)."""
    dropped = []
    conn.execute("SELECT set_config('lock_timeout', %s, false)", (DROP_LOCK_TIMEOUT,))
    for schema in schemas:
        try:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
            dropped.append(schema)
        except psycopg.errors.LockNotAvailable:
            continue
    return dropped


def _run_schemas(conn: psycopg.Connection[Any]) -> dict[int, list[str]]:
    """The runs' schemas on `conn`'s database, by token."""
    rows = conn.execute(
        "SELECT nspname FROM pg_namespace WHERE nspname LIKE %s ORDER BY nspname",
        (SCHEMA_PREFIX.replace("_", "\\_") + "%",),
    ).fetchall()
    found: dict[int, list[str]] = {}
    for (name,) in rows:
        match = _RUN_SCHEMA.match(name)
        if match:
            found.setdefault(int(match[1], 16), []).append(name)
    return found


def _drop_databases(conn: psycopg.Connection[Any], names: list[str]) -> list[str]:
    """Drop the databases `names` (those there), ending their sessions (a killed run's
    workers may have left some); returns those dropped."""
    there = conn.execute(
        "SELECT datname FROM pg_database WHERE datname = ANY(%s)", (names,)
    ).fetchall()
    for (name,) in there:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(name)))  # fmt: skip
    return [name for (name,) in there]


def _run_databases(conn: psycopg.Connection[Any]) -> dict[int, list[str]]:
    """The runs' databases on `conn`'s server, by token."""
    rows = conn.execute(
        "SELECT datname FROM pg_database WHERE datname LIKE %s ORDER BY datname",
        (SCHEMA_PREFIX.replace("_", "\\_") + "%",),
    ).fetchall()
    found: dict[int, list[str]] = {}
    for (name,) in rows:
        match = _RUN_DATABASE.match(name)
        if match:
            found.setdefault(int(match[1], 16), []).append(name)
    return found


@contextlib.contextmanager
def _if_dead(conn: psycopg.Connection[Any], token: int) -> Iterator[bool]:
    """Whether `token`'s run holds no lock any more (its processes are gone); if so, the
    lock is held here until the block ends, so that no process of that run starts anew."""
    row = conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (LOCK_SPACE, token))
    if not row.fetchone()[0]:  # type: ignore[index]
        yield False  # its run is still going
        return
    try:
        yield True
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s, %s)", (LOCK_SPACE, token))


_Listing = Callable[[psycopg.Connection[Any]], dict[int, list[str]]]
_Dropping = Callable[[psycopg.Connection[Any], list[str]], list[str]]


def _sweep(base: str | None, listing: _Listing, dropping: _Dropping) -> list[str]:
    """Drop what `listing` finds on `base` (default: the server tests use, if one is
    there) for runs that hold no lock any more, with `dropping`; returns the names
    dropped. A server that does not answer has nothing to sweep here: the tests that need
    it say why they cannot reach it."""
    base = base or _given_url()
    if base is None:
        return []
    dropped: list[str] = []
    with (
        contextlib.suppress(psycopg.OperationalError),
        psycopg.connect(base, autocommit=True, connect_timeout=5) as conn,
    ):
        for token, names in listing(conn).items():
            with _if_dead(conn, token) as dead:
                if dead:
                    dropped += dropping(conn, names)
    return dropped


def sweep_schemas(base: str | None = None) -> list[str]:
    """Drop the schemas on `base` whose run holds no lock any more; returns their names."""
    return _sweep(base, _run_schemas, _drop)


def sweep_databases(base: str | None = None) -> list[str]:
    """Drop the runs' databases on `base`'s server whose run holds no lock in `base` any
    more; returns their names."""
    return _sweep(base, _run_databases, _drop_databases)


def drop_run_schemas(run: leftovers.RunId, base: str | None = None) -> list[str]:
    """Drop every schema of `run` on `base` (default: the server tests use, if one is
    there), at the run's end, whatever its lock: its processes are gone."""
    base = base or _given_url()
    if base is None:
        return []
    with (
        contextlib.suppress(psycopg.OperationalError),
        psycopg.connect(base, autocommit=True, connect_timeout=5) as conn,
    ):
        return _drop(conn, _run_schemas(conn).get(run_token(run), []))
    return []


def drop_run_database(run: leftovers.RunId, base: str | None = None) -> list[str]:
    """Drop `run`'s database on `base`'s server (default: the server tests use, if one is
    there), at the run's end: its processes are gone. Returns it if it was there."""
    base = base or _given_url()
    if base is None:
        return []
    with (
        contextlib.suppress(psycopg.OperationalError),
        psycopg.connect(base, autocommit=True, connect_timeout=5) as conn,
    ):
        return _drop_databases(conn, [run_database(run)])
    return []
