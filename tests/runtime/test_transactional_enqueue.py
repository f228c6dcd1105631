"""Transactional enqueue: `connection=` writes the job in the caller's open transaction,
so it exists if and only if that transaction commits (docs/INTERFACE.md)."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import sqlalchemy

import heartq
from heartq.errors import ConfigError
from heartq.store.postgres.connection import parse_url
from tests.conftest import on_every_backend

pytestmark = on_every_backend  # the caller's own connection: each backend's drivers


@pytest.fixture
def connect(app: heartq.App) -> Iterator[Any]:
    """`connect()`: a connection of the application's own on the queue's database, as an
    application opens it (default settings: not autocommit), on a queue heartq created
    (SQLite: in WAL mode, so heartq reads while the application's transaction writes)."""
    app.migrate()
    opened: list[Any] = []

    def make() -> Any:
        url = app.store.link.url
        if url.startswith("sqlite"):
            conn: Any = sqlite3.connect(app.store.link.path)  # type: ignore[attr-defined]
        else:
            conn = psycopg.connect(parse_url(url)[0], options=own_schema(app))
        opened.append(conn)
        return conn

    yield make
    for conn in opened:
        conn.close()


def own_schema(app: heartq.App) -> str:
    """PostgreSQL: the application's tables go in the test's schema (dropped after it)."""
    return f"-c search_path={parse_url(app.store.link.url)[1]}"


@pytest.fixture
def orders(app: heartq.App, connect: Any) -> None:
    """The application's own table, beside the queue."""
    conn = connect()
    conn.execute("CREATE TABLE IF NOT EXISTS orders (id integer PRIMARY KEY, item text)")
    conn.commit()


def _count(app: heartq.App, task: str) -> int:
    return sum(1 for job in app.store.list_jobs() if job["task"] == task)


def test_a_rolled_back_enqueue_leaves_no_job_and_a_committed_one_exactly_one(
    app: heartq.App, connect: Any, orders: None
) -> None:
    @app.task
    def ship(order_id: int) -> None:
        """Runs where the workers are."""

    conn = connect()
    conn.execute("INSERT INTO orders VALUES (1, 'book')")
    rolled_back = ship.options(connection=conn).enqueue(order_id=1)
    many = app.enqueue_many("ship", [{"order_id": 2}, {"order_id": 3}], connection=conn)
    conn.rollback()
    assert _count(app, "ship") == 0
    with pytest.raises(heartq.JobNotFound):
        app.get_job(rolled_back)
    assert many

    conn.execute("INSERT INTO orders VALUES (1, 'book')")
    job_id = app.enqueue("ship", {"order_id": 1}, connection=conn)
    batch = app.enqueue_many("ship", [{"order_id": 4}, {"order_id": 5}], connection=conn)
    assert _count(app, "ship") == 0  # not visible before the commit
    conn.commit()
    assert _count(app, "ship") == 3
    assert app.get_job(job_id)["args"] == {"order_id": 1}
    assert [app.get_job(i)["status"] for i in batch] == ["queued", "queued"]
    assert conn.execute("SELECT count(*) FROM orders").fetchone()[0] == 1


def test_a_transactional_job_runs_once_committed(
    app: heartq.App, connect: Any, orders: None, run_worker: Any
) -> None:
    @app.task
    def double(x: int) -> int:
        return 2 * x

    with run_worker(app):
        conn = connect()
        conn.execute("INSERT INTO orders VALUES (7, 'lamp')")
        job_id = double.options(connection=conn).enqueue(x=21)
        conn.commit()
        assert app.result(job_id, timeout=15) == 42


def test_connections_heartq_cannot_enqueue_through_are_refused(
    app: heartq.App, connect: Any, tmp_path: Any
) -> None:
    """One clear error, nothing stored, the caller's transaction untouched."""

    @app.task
    def noop() -> None:
        """Never runs."""

    with pytest.raises(ConfigError, match="not str"):
        noop.options(connection="postgresql://nowhere").enqueue()
    if app.store.link.url.startswith("sqlite"):
        elsewhere = sqlite3.connect(tmp_path / "other.db")
        with pytest.raises(ConfigError, match="open the connection on the queue's file"):
            app.enqueue("noop", connection=elsewhere)
        elsewhere.close()
        autocommit = sqlite3.connect(app.store.link.path, isolation_level=None)  # type: ignore[attr-defined]
        with pytest.raises(ConfigError, match="autocommit mode with no open transaction"):
            app.enqueue("noop", connection=autocommit)
        autocommit.execute("BEGIN")
        app.enqueue("noop", connection=autocommit)
        autocommit.execute("ROLLBACK")
        autocommit.close()
    else:
        autocommit = psycopg.connect(parse_url(app.store.link.url)[0], autocommit=True)
        with pytest.raises(ConfigError, match="autocommit mode with no open transaction"):
            app.enqueue("noop", connection=autocommit)
        with autocommit.transaction():
            before = autocommit.execute("SHOW search_path").fetchone()
            app.enqueue("noop", connection=autocommit)
            assert autocommit.execute("SHOW search_path").fetchone() == before
            raise_rollback(autocommit)
        failed = connect()
        with pytest.raises(psycopg.errors.DivisionByZero):
            failed.execute("SELECT 1 / 0")
        with pytest.raises(ConfigError, match="its transaction failed"):
            app.enqueue("noop", connection=failed)
        autocommit.close()
        _another_database_is_refused(app)
    assert _count(app, "noop") == 0


def _another_database_is_refused(app: heartq.App) -> None:
    """A connection to another database of the server (without heartq's schema): one
    line naming both, not `UndefinedTable: relation "lanes" does not exist`; the caller's
    transaction goes on (heartq only read)."""
    conninfo, schema = parse_url(app.store.link.url)
    refused = (
        f"the connection is on database 'postgres', where schema '{schema}' holds no heartq "
        f"queue: open it on the queue's database ("
    )
    with psycopg.connect(conninfo, dbname="postgres") as elsewhere:
        with pytest.raises(ConfigError) as raised:
            app.enqueue("noop", connection=elsewhere)
        assert str(raised.value).startswith(refused)
        assert elsewhere.execute("SELECT 1").fetchone() == (1,)  # still usable

    async def in_asyncio() -> None:
        async with await psycopg.AsyncConnection.connect(conninfo, dbname="postgres") as conn:
            with pytest.raises(ConfigError) as raised:
                await app.enqueue_async("noop", connection=conn)
            assert str(raised.value).startswith(refused)

    asyncio.run(in_asyncio())


def raise_rollback(conn: psycopg.Connection[Any]) -> None:
    """End the enclosing `conn.transaction()` block with a rollback."""
    raise psycopg.Rollback()


def test_async_enqueue_in_an_asyncio_connection(app: heartq.App) -> None:
    """PostgreSQL's `psycopg.AsyncConnection`; SQLite has none and says so."""

    @app.task
    def notify(user: str) -> None:
        """Never runs."""

    if app.store.link.url.startswith("sqlite"):

        class FakeAsync:  # the shape of an asyncio connection, for the refusal only
            async def execute(self, *_: Any) -> None:
                raise AssertionError("never called")

        with pytest.raises(ConfigError, match="takes no asyncio connection"):
            asyncio.run(app.enqueue_async("notify", {"user": "x"}, connection=FakeAsync()))
        assert _count(app, "notify") == 0
        return

    async def main() -> tuple[list[str], list[str]]:
        conninfo = parse_url(app.store.link.url)[0]
        async with await psycopg.AsyncConnection.connect(conninfo) as conn:
            async with conn.transaction(force_rollback=True):
                lost = [await notify.options(connection=conn).enqueue_async(user="a")]
                lost += await app.enqueue_many_async("notify", [{"user": "b"}], connection=conn)
            async with conn.transaction():
                kept = [await app.enqueue_async("notify", {"user": "c"}, connection=conn)]
                kept += await app.enqueue_many_async("notify", [{"user": "d"}], connection=conn)
        return lost, kept

    lost, kept = asyncio.run(main())
    assert _count(app, "notify") == 2
    assert {app.get_job(i)["args"]["user"] for i in kept} == {"c", "d"}
    for job_id in lost:
        with pytest.raises(heartq.JobNotFound):
            app.get_job(job_id)


def test_sqlalchemy_passes_its_driver_connection(app: heartq.App, orders: None) -> None:
    """docs/INTEGRATIONS.md, "Enqueue in your own transaction": SQLAlchemy 2."""
    url = app.store.link.url
    if url.startswith("sqlite"):
        engine = sqlalchemy.create_engine(f"sqlite:///{app.store.link.path}")  # type: ignore[attr-defined]
    else:
        engine = sqlalchemy.create_engine(
            parse_url(url)[0].replace("postgresql://", "postgresql+psycopg://", 1),
            connect_args={"options": own_schema(app)},
        )

    @app.task
    def ship(order_id: int) -> None:
        """Runs where the workers are."""

    insert = sqlalchemy.text("INSERT INTO orders VALUES (:id, :item)")
    with engine.begin() as conn:  # commits at the end of the block
        conn.execute(insert, {"id": 11, "item": "pen"})
        kept = ship.options(connection=conn.connection.driver_connection).enqueue(order_id=11)
    with pytest.raises(RuntimeError), engine.begin() as conn:  # rolls back
        conn.execute(insert, {"id": 12, "item": "ink"})
        ship.options(connection=conn.connection.driver_connection).enqueue(order_id=12)
        raise RuntimeError("the order is refused")
    engine.dispose()
    assert _count(app, "ship") == 1
    assert app.get_job(kept)["args"] == {"order_id": 11}


DJANGO_SCRIPT = textwrap.dedent(
    """
    import os, sys
    import django
    from django.conf import settings

    queue_url, db, options = sys.argv[1], sys.argv[2], sys.argv[3]
    if db.startswith("/"):
        database = {"ENGINE": "django.db.backends.sqlite3", "NAME": db}
    else:
        from urllib.parse import urlsplit
        parts = urlsplit(db)
        database = {"ENGINE": "django.db.backends.postgresql", "NAME": parts.path[1:],
                    "USER": parts.username or "", "HOST": parts.hostname or "",
                    "PORT": str(parts.port or ""), "OPTIONS": {"options": options}}
    settings.configure(DATABASES={"default": database}, USE_TZ=True)
    django.setup()

    import heartq
    from django.db import connection, transaction

    app = heartq.App(queue_url)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO orders VALUES (21, 'django')")
        kept = app.enqueue("ship", {"order_id": 21}, connection=connection.connection)
    try:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("INSERT INTO orders VALUES (22, 'refused')")
            app.enqueue("ship", {"order_id": 22}, connection=connection.connection)
            raise RuntimeError("rolled back")
    except RuntimeError:
        pass
    print(kept)
    """
)


def test_django_passes_its_connection(app: heartq.App, orders: None) -> None:
    """docs/INTEGRATIONS.md, "Enqueue in your own transaction": Django's
    `connection.connection` inside `transaction.atomic()` (in a process of its own:
    Django's settings are process-global)."""
    url = app.store.link.url
    db = str(app.store.link.path) if url.startswith("sqlite") else parse_url(url)[0]  # type: ignore[attr-defined]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEARTQ_")}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            DJANGO_SCRIPT,
            url,
            db,
            "" if db.startswith("/") else own_schema(app),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    kept = done.stdout.strip()
    assert app.get_job(kept)["args"] == {"order_id": 21}
    assert [j["args"] for j in app.store.list_jobs() if j["task"] == "ship"] == [{"order_id": 21}]
