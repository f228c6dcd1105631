"""`SQLiteStore`: the SQL store built over SQLite's objects.

Why a class of its own that overrides nothing: `open_store` and the tests name the
backend by its class; everything SQLite does its own way is in the objects this wires
together around one database file: the dialect (`dialect.py`), the liveness lock files
(`liveness.py`) and the link (`link.py`: the connections, the schema, no
notifications). The file and the pool's options are read from the store's URL here
(`path_from_url`, `options_from_url`): the pool itself knows a path, a busy timeout and
a `synchronous` level, not URLs.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from heartq.errors import ConfigError
from heartq.store.sql.store import SqlStore
from heartq.store.sqlite.connection import (
    DEFAULT_BUSY_TIMEOUT,
    DEFAULT_SYNCHRONOUS,
    SYNCHRONOUS,
    ConnectionPool,
)
from heartq.store.sqlite.dialect import SQLiteDialect
from heartq.store.sqlite.link import SQLiteLink
from heartq.store.sqlite.liveness import LockFileLiveness


class SQLiteStore(SqlStore):
    """`Store` on a SQLite file. Thread-safe: each thread uses its own connection."""

    link: SQLiteLink

    def __init__(
        self, url: str, *, busy_timeout: float | None = None, reading: bool = False
    ) -> None:
        path = path_from_url(url)
        options = options_from_url(url)
        timeout = busy_timeout if busy_timeout is not None else options.busy_timeout
        pool = ConnectionPool(
            path,
            DEFAULT_BUSY_TIMEOUT if timeout is None else timeout,
            options.synchronous,
            reading=reading,
        )
        dialect = SQLiteDialect(pool, url, path)
        liveness = LockFileLiveness(dialect, path)
        super().__init__(dialect, liveness, SQLiteLink(pool, dialect, liveness))


class UrlOptions(NamedTuple):
    """What a `sqlite://` URL's query sets."""

    busy_timeout: float | None = None
    synchronous: str = DEFAULT_SYNCHRONOUS


def path_from_url(url: str) -> Path:
    """`sqlite:///rel.db` is relative to the working directory, `sqlite:////abs.db` absolute."""
    prefix = "sqlite://"
    if not url.startswith(prefix):
        raise ConfigError(f"not a SQLite URL: {url!r}")
    rest = url[len(prefix) :].split("?", 1)[0]
    if not rest.startswith("/") or rest == "/":
        raise ConfigError(
            f"bad SQLite URL {url!r}: write sqlite:///relative.db or sqlite:////absolute/path.db"
        )
    path = rest[1:]
    if path in (":memory:", ""):
        raise ConfigError("heartq needs a SQLite file shared by its processes, not :memory:")
    return Path(path)


def options_from_url(url: str) -> UrlOptions:
    """Query options: `?busy_timeout=S` (seconds a writer waits for the lock, default 30)
    and `?synchronous=full|normal` (default full, see `SYNCHRONOUS`)."""
    from urllib.parse import parse_qsl

    query = url.split("?", 1)[1] if "?" in url else ""
    options = UrlOptions()
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key == "busy_timeout":
            options = options._replace(busy_timeout=_seconds(value))
        elif key == "synchronous":
            if value.lower() not in SYNCHRONOUS:
                raise ConfigError(
                    f"synchronous must be full or normal, got {value!r} (docs/OPERATIONS.md)"
                )
            options = options._replace(synchronous=value.lower())
        else:
            raise ConfigError(
                f"unknown SQLite URL option {key!r} (known: busy_timeout, synchronous)"
            )
    return options


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise ConfigError(f"busy_timeout must be a number of seconds, got {value!r}") from None
    if not 0 <= seconds < float("inf"):  # NaN too
        raise ConfigError(f"busy_timeout must be finite and not negative, got {value!r}")
    return seconds
