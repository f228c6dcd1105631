"""The migrated SQLite databases tests are handed (`tests/sqlite_template.py`): copies of
one file the migrations made, each the database a migration makes, with a deployment id
of its own."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

from heartq.store import open_store
from tests.sqlite_template import Template


def _contents(path: Path) -> dict[str, Any]:
    """Every schema object's SQL and every table's rows, but what differs between two
    migrations of their own: the deployment row (its id is random, its time the
    migration's) and the times the migrations were recorded at."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        objects = conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"
        ).fetchall()
        rows: dict[str, Any] = {"objects": objects}
        for (table,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        ).fetchall():
            if table == "heartq_deployment":
                rows[table] = conn.execute(f"SELECT count(*) FROM {table}").fetchall()
                continue
            columns = [c[1] for c in conn.execute(f"PRAGMA table_info({table})").fetchall()]
            kept = [c for c in columns if c != "applied_at"]
            rows[table] = sorted(conn.execute(f"SELECT {', '.join(kept)} FROM {table}").fetchall())
        rows["user_version"] = conn.execute("PRAGMA user_version").fetchall()
        rows["journal_mode"] = conn.execute("PRAGMA journal_mode").fetchall()
        return rows


def _deployment(path: Path) -> str:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return str(conn.execute("SELECT id FROM heartq_deployment").fetchone()[0])


def test_a_copy_is_the_database_a_migration_makes_with_a_deployment_of_its_own(
    tmp_path: Path,
) -> None:
    migrated = tmp_path / "migrated.db"
    store = open_store(f"sqlite:///{migrated}")
    version = store.link.migrate()
    store.link.close()
    (tmp_path / "template").mkdir()
    template = Template(tmp_path / "template")
    first, second = tmp_path / "first.db", tmp_path / "second.db"
    template.copy_to(first)
    template.copy_to(second)

    assert _contents(first) == _contents(migrated)
    ids = {_deployment(path) for path in (migrated, template.path, first, second)}
    assert len(ids) == 4 and all(len(each) == 16 for each in ids)
    copy = open_store(f"sqlite:///{first}")
    try:
        assert copy.link.migrate() == version  # at the migrations' version, none left
    finally:
        copy.link.close()
