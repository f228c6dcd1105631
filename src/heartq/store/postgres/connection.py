"""PostgreSQL connections: URL handling, a pool, and errors turned into clear ones.

`postgresql://user:pass@host:5432/db?schema=NAME` (`postgres://` too). `schema` (default
`heartq`) is heartq's own; every other query parameter goes to libpq as is. Each
connection runs with `search_path` set to that schema, so the SQL names tables plainly.
JSON columns come back as text, exactly as stored, as in the SQLite backend.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg.rows import dict_row
from psycopg.types.string import TextLoader
from psycopg_pool import ConnectionPool, PoolTimeout

from heartq.errors import ConfigError, PayloadError, StoreUnavailable
from heartq.store import redact

DEFAULT_SCHEMA = "heartq"
"""Defaults to a schema named `heartq`."""
DEFAULT_POOL_SIZE = 10
"""Defaults to at most 10 connections per process."""
CONNECT_TIMEOUT = 5.0
"""Seconds to wait for a connection before the operation fails with `StoreUnavailable`."""
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def parse_url(url: str) -> tuple[str, str]:
    """`(libpq conninfo URL without heartq's options, schema)`."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ConfigError(f"not a PostgreSQL URL: {redact(url)!r}")
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = DEFAULT_SCHEMA
    rest = []
    for key, value in query:
        if key == "schema":
            schema = value
        else:
            rest.append((key, value))
    if not _SCHEMA_NAME.match(schema):
        raise ConfigError(
            f"bad schema name {schema!r}: use lowercase letters, digits and underscores"
        )
    conninfo = urlunsplit(parts._replace(scheme="postgresql", query=urlencode(rest)))
    return conninfo, schema


def translate(exc: Exception, url: str) -> Exception:
    where = redact(url)
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, PoolTimeout):
        return StoreUnavailable(
            f"cannot reach PostgreSQL at {where}: no connection within {CONNECT_TIMEOUT:g} s"
        )
    if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction):
        return StoreUnavailable(f"PostgreSQL at {where} is read-only: {first}")
    if isinstance(exc, psycopg.OperationalError):
        return StoreUnavailable(f"cannot use PostgreSQL at {where}: {first}")
    if isinstance(exc, psycopg.errors.UniqueViolation):
        return exc  # the caller knows what a constraint means there
    if isinstance(exc, psycopg.DataError):
        return PayloadError(f"PostgreSQL at {where} refused the data: {first}")
    if isinstance(exc, psycopg.errors.InsufficientPrivilege):
        return StoreUnavailable(f"PostgreSQL at {where} refused: {first}")
    return exc


def _configure(conn: psycopg.Connection[Any]) -> None:
    for name in ("json", "jsonb"):
        conn.adapters.register_loader(name, TextLoader)


class Pool:
    """A connection pool whose connections use the heartq schema."""

    def __init__(self, url: str, size: int = DEFAULT_POOL_SIZE) -> None:
        self.url = url
        self.conninfo, self.schema = parse_url(url)
        self._pool: ConnectionPool[Any] | None = None
        self._size = size

    @property
    def connect_kwargs(self) -> dict[str, Any]:
        return {
            "options": f"-c search_path={self.schema}",
            "connect_timeout": int(CONNECT_TIMEOUT),
            "row_factory": dict_row,
        }

    def _get_pool(self) -> ConnectionPool[Any]:
        if self._pool is None:
            self._pool = ConnectionPool(
                self.conninfo,
                min_size=1,
                max_size=self._size,
                kwargs=self.connect_kwargs,
                configure=_configure,
                check=ConnectionPool.check_connection,
                timeout=CONNECT_TIMEOUT,
                open=True,
                name="heartq",
            )
        return self._pool

    @contextlib.contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """One transaction: committed when the block ends, rolled back on an error."""
        try:
            with self._get_pool().connection() as conn:
                yield conn
        except (psycopg.Error, PoolTimeout) as exc:
            raise translate(exc, self.url) from exc

    def connect(self, autocommit: bool = True) -> psycopg.Connection[Any]:
        """A connection of its own (liveness lock, LISTEN), outside the pool."""
        try:
            conn = psycopg.connect(self.conninfo, autocommit=autocommit, **self.connect_kwargs)
        except psycopg.Error as exc:
            raise translate(exc, self.url) from exc
        _configure(conn)
        return conn

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
