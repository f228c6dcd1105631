"""Fixtures of the unit tests: no database, and the events a test heard.

Every test here runs with database connections refused (`no_database`, autouse): the
logic under test (the worker's ledger, claimer and completer) needs none, and a test
that reached one by mistake fails at once instead of quietly turning into a slow test
of a database. The store interface these parts call is an in-memory fake
(`tests/unit/fakes.py`); every store operation itself is tested on real databases in
tests/conformance, and the parts together on real workers in tests/runtime.
"""

from __future__ import annotations

import sqlite3
from typing import Any, NoReturn

import pytest

from .fakes import Heard


def _refuse(*args: Any, **kwargs: Any) -> NoReturn:
    raise AssertionError("a unit test opened a database connection: tests/unit runs without one")


@pytest.fixture(autouse=True)
def no_database(monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite's and PostgreSQL's connects raise for the test's duration."""
    monkeypatch.setattr(sqlite3, "connect", _refuse)
    try:
        import psycopg
    except ImportError:  # heartq without its postgres extra: nothing to refuse
        return
    monkeypatch.setattr(psycopg, "connect", _refuse)
    monkeypatch.setattr(psycopg.Connection, "connect", classmethod(_refuse))


@pytest.fixture
def heard() -> Heard:
    """The events of a stream of the test's own (`heard.stream`), and of any other it
    listens to (`heard.listen(app.events)`), as they are told."""
    return Heard()
