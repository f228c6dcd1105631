"""Fixtures of the conformance suite (the `store` fixtures live in tests/conftest.py)."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from heartq.store import Store
from heartq.store.postgres.connection import parse_url
from tests import pg_harness


@pytest.fixture
def pg_url(pg_server_url: str) -> Iterator[str]:
    """A schema of its own on the suite's PostgreSQL server, for the tests of PostgreSQL's
    own tables (its migrations, its tails, its end rows), dropped after."""
    with pg_harness.schema_url(pg_server_url) as url:
        yield url


@pytest.fixture
def t0(store: Store) -> float:
    """A base time from the database's clock, in whole seconds so that times compare
    exactly in ISO-8601 (millisecond) form. Tests add to it and pass it as `now=`."""
    return float(math.floor(store.clock()))


@pytest.fixture
def connect(store: Store, store_url: str) -> Iterator[Any]:
    """A connection of the application's own on the queue's database, not autocommit."""
    opened: list[Any] = []

    def make() -> Any:
        if store_url.startswith("sqlite"):
            conn: Any = sqlite3.connect(store.link.path)  # type: ignore[attr-defined]
        else:
            conn = psycopg.connect(parse_url(store_url)[0])
        opened.append(conn)
        return conn

    yield make
    for conn in opened:
        conn.close()
