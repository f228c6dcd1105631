"""Both dialects name the same statements: every statement the shared SQL store runs
(`self.q.NAME` and `q.NAME` in `store/sql/`) exists in the SQLite and the PostgreSQL
`queries/`, so a feature written once works on both, and one dialect can be diffed
against the other."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import heartq.store.sql
from heartq.store.postgres import queries as pg
from heartq.store.sqlite import queries as sqlite

SHARED = "".join(p.read_text() for p in sorted(Path(heartq.store.sql.__file__).parent.glob("*.py")))
USED = sorted(set(re.findall(r"\bq\.([A-Z_]+)\b", SHARED)) - {"NAME"})  # "q.NAME" in prose


def test_the_shared_store_runs_statements() -> None:
    assert {"CLAIM", "HEARTBEAT", "FINISH", "RELEASE", "INSERT_JOBS"} <= set(USED)


@pytest.mark.parametrize("name", USED)
def test_each_dialect_has_the_statement(name: str) -> None:
    for dialect in (sqlite, pg):
        statement = getattr(dialect, name, None)
        assert statement, f"{dialect.__name__} has no {name}"
        parts = statement if isinstance(statement, tuple) else (statement,)
        assert all(isinstance(p, str) and p.strip() for p in parts), name
