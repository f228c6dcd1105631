"""What a store sends: every statement, traced from the test's own thread."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from heartq.store.interface import Store


def trace(store: Store, record: Callable[[str], None], monkeypatch: pytest.MonkeyPatch) -> None:
    """Call `record(sql)` for every statement `store` sends from now on, from this thread
    (the calls under test run here)."""
    if hasattr(store.link, "trace_statements"):  # SQLite: the link's own hook
        store.link.trace_statements(record)
        return
    # PostgreSQL: every statement goes through a psycopg cursor. psycopg's implicit
    # BEGIN/COMMIT are not counted; the pool's empty liveness check is left out, and so
    # is what other threads of the process send (the test schemas made ahead of tests).
    original = psycopg.Cursor.execute
    mine = threading.get_ident()

    def execute(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        text = query.as_string(self) if hasattr(query, "as_string") else query
        text = text.decode() if isinstance(text, bytes) else str(text)
        if text.strip() and threading.get_ident() == mine:
            record(text)
        return original(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", execute)
