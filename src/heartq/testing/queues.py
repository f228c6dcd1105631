"""A fresh, empty queue for each test, and an app pointed at it for the test's length.

Where: a SQLite file in a directory of its own by default; on PostgreSQL when a server
is named (`postgresql://...`), a new schema there (`heartq_test_<random>`), dropped with
everything in it afterwards. A test's queue never sees another test's jobs, and tests
may run in parallel (pytest-xdist) on one server.

The user's own app object is re-pointed (`App.use_url`) rather than copied: the tasks
were registered on it, its hooks are on it, and the code under test imports it. Its URL
and transport are put back afterwards. The transport (NATS) is off meanwhile: a test's
jobs go by the database alone, and never wake workers of a shared server.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from heartq.app import App
from heartq.errors import ConfigError, StoreUnavailable
from heartq.store import redact, redact_text

ENV_TEST_URL = "HEARTQ_TEST_URL"
"""Where test queues are made when no server is named (`--heartq-url` for the pytest
plugin)."""
SCHEMA_PREFIX = "heartq_test_"
"""A test's PostgreSQL schema is named `heartq_test_` and 16 random hex digits."""
DROP_CONNECT_TIMEOUT = 5
"""Seconds to reach the server to drop a test's schema."""


def server_kind(server: str | None) -> str:
    """`sqlite` (None, empty, `sqlite` or a `sqlite://` URL: a file per test) or
    `postgresql` (a `postgresql://` or `postgres://` URL: a schema per test); anything
    else is a `ConfigError` of one line, the password hidden."""
    if not server or server == "sqlite" or server.startswith("sqlite:"):
        return "sqlite"
    if server.startswith(("postgresql://", "postgres://")):
        return "postgresql"
    raise ConfigError(
        f"a test queue is made on 'sqlite' or a postgresql:// server URL, got {redact(server)!r}"
    )


@contextlib.contextmanager
def fresh_queue_url(server: str | None = None, directory: Path | None = None) -> Iterator[str]:
    """The URL of a new, empty queue, removed afterwards: a SQLite file (in `directory`,
    kept, else in a temporary directory, removed), or a new schema on the PostgreSQL
    `server` (dropped)."""
    if server_kind(server) == "postgresql":
        assert server is not None
        schema = f"{SCHEMA_PREFIX}{uuid.uuid4().hex[:16]}"
        try:
            yield _with_schema(server, schema)
        finally:
            _drop_schema(server, schema)
        return
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
        yield f"sqlite:///{directory.resolve() / 'heartq.db'}"
        return
    made = Path(tempfile.mkdtemp(prefix="heartq-test-"))
    try:
        yield f"sqlite:///{made / 'heartq.db'}"
    finally:
        shutil.rmtree(made, ignore_errors=True)


@contextlib.contextmanager
def use_fresh_queue(
    app: App, server: str | None = None, directory: Path | None = None
) -> Iterator[App]:
    """`app` pointed at a fresh queue (`fresh_queue_url`) until the block ends, its
    transport off; then its URL and transport as they were, the queue removed."""
    with fresh_queue_url(server, directory) as url:
        saved_url, saved_transport = app.url, app.transport_url
        _set_transport(app, None)
        app.use_url(url)
        try:
            yield app
        finally:
            app.use_url(saved_url)  # closes the test queue's connections
            _set_transport(app, saved_transport)


def _set_transport(app: App, url: str | None) -> None:
    """Close the app's transport and set its URL as given (not re-read from the
    environment, as `use_transport(None)` would)."""
    app.use_transport(None)
    app.transport_url = url


def _with_schema(server: str, schema: str) -> str:
    """`server` with heartq's `schema` parameter set to `schema` (any other kept)."""
    parts = urlsplit(server)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "schema"]
    return urlunsplit(parts._replace(query=urlencode([*query, ("schema", schema)])))


def _drop_schema(server: str, schema: str) -> None:
    """Drop a test's schema and everything in it. The name is ours (`SCHEMA_PREFIX` and
    hex digits) and passed as an identifier, never as text in the statement."""
    import psycopg
    from psycopg import sql

    from heartq.store.postgres.connection import first_line, parse_url

    conninfo, _ = parse_url(server)
    try:
        with psycopg.connect(
            conninfo, autocommit=True, connect_timeout=DROP_CONNECT_TIMEOUT
        ) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    except psycopg.Error as exc:
        raise StoreUnavailable(
            f"could not drop the test schema {schema} on {redact(server)}: "
            f"{redact_text(first_line(exc))}"
        ) from None
