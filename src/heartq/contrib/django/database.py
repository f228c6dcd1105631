"""The queue in one of Django's own databases: its heartq URL, read from the database's
settings, and whether an enqueue can join the transaction open on Django's connection.

The URL is read from the connection's settings each time it is asked for, not once:
Django's test runner renames a database to its test copy after the task modules were
imported, and a queue that kept the first name would take a test's jobs to the real
database.
"""

from __future__ import annotations

import functools
import os
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from django.core.exceptions import ImproperlyConfigured

LIBPQ_OPTIONS = frozenset(
    {
        "sslmode",
        "sslrootcert",
        "sslcert",
        "sslkey",
        "sslpassword",
        "sslcrl",
        "connect_timeout",
        "target_session_attrs",
        "passfile",
        "gssencmode",
        "channel_binding",
        "keepalives",
        "keepalives_idle",
        "keepalives_interval",
        "keepalives_count",
        "tcp_user_timeout",
    }
)
"""A PostgreSQL database's `OPTIONS` heartq's connections take too: how to reach and trust
the server. The others (`options`, `isolation_level`, `pool`, `server_side_binding`,
`assume_role`, ...) shape Django's sessions, not heartq's, which set their own."""


def in_memory(name: str) -> bool:
    """Whether a SQLite database name is an in-memory database (Django's test default)."""
    return name in ("", ":memory:") or "mode=memory" in name


def queue_url(alias: str, settings_dict: Mapping[str, Any], schema: str | None) -> str:
    """The heartq URL of the queue kept in the Django database `alias`: the same SQLite
    file, or the same PostgreSQL database (heartq's tables in their own schema, `schema`
    or heartq's default). `ImproperlyConfigured` (one line) for a database heartq cannot
    keep a queue in: another engine, or SQLite in memory, which other processes cannot
    open. Read at every enqueue: the settings' words are the key of a cache (a SQLite
    path's resolution alone was a fifth of the backend's own time an enqueue)."""
    options = dict(settings_dict.get("OPTIONS") or {})
    return _url(
        alias,
        str(settings_dict.get("ENGINE", "")),
        *(str(settings_dict.get(key) or "") for key in ("NAME", "USER", "PASSWORD", "HOST")),
        str(settings_dict.get("PORT") or ""),
        tuple(sorted((k, str(v)) for k, v in options.items() if k in LIBPQ_OPTIONS)),
        schema,
        os.getcwd(),  # a relative SQLite name is the working directory's
    )


@functools.lru_cache(maxsize=64)
def _url(
    alias: str,
    engine: str,
    name: str,
    user: str,
    password: str,
    host: str,
    port: str,
    libpq: tuple[tuple[str, str], ...],
    schema: str | None,
    cwd: str,
) -> str:
    if engine.endswith("sqlite3"):
        if in_memory(name):
            raise ImproperlyConfigured(
                f"heartq cannot keep its queue in database {alias!r}: it is a SQLite "
                "database in memory, which the workers' processes cannot open (in tests: "
                "heartq.contrib.django.testing.fresh_queue())"
            )
        return f"sqlite:///{(Path(cwd) / name).resolve()}"
    if "postgresql" in engine or "postgis" in engine:
        who = quote(user, safe="") + (f":{quote(password, safe='')}" if password else "")
        where = quote(host, safe="") + (f":{port}" if port else "")
        params = dict(libpq, **({"schema": schema} if schema else {}))
        query = f"?{urlencode(params)}" if params else ""
        return f"postgresql://{who}{'@' if who else ''}{where}/{quote(name, safe='')}{query}"
    raise ImproperlyConfigured(
        f"heartq keeps its queue in SQLite or PostgreSQL, and database {alias!r} is "
        f"{engine or 'not set'}: give the backend OPTIONS['URL'] (a queue of its own)"
    )


def joinable(vendor: str, raw_connection: Any) -> bool:
    """Whether heartq can write a job on this DB-API connection of Django's, in its
    transaction: psycopg 3's on PostgreSQL (with psycopg2 the enqueue waits for the
    commit instead), Python's sqlite3 on SQLite."""
    if vendor == "postgresql":
        try:
            import psycopg
        except ImportError:
            return False
        return isinstance(raw_connection, psycopg.Connection)
    return vendor == "sqlite" and isinstance(raw_connection, sqlite3.Connection)
