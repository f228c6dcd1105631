"""Migrating a SQLite file: read first, then apply what is missing in one `BEGIN
IMMEDIATE` transaction.

Why apart from the dialect: a migration runs once per store, with its own way of
splitting scripts; the dialect only remembers that it ran.
"""

from __future__ import annotations

import sqlite3

from heartq.store.sql.base import missing_migrations, refuse_unknown_versions, schema_version
from heartq.store.sqlite import queries as q
from heartq.store.sqlite.connection import ConnectionPool


def migrate(pool: ConnectionPool, scripts: list[tuple[int, str]]) -> int:
    """Bring the file's schema up to date with `scripts`; returns its version. Reads
    first: an up-to-date schema is left alone, without taking the write lock, so the
    first heartq call of a process can run while another connection holds that lock (an
    application's transaction that enqueues through its own connection)."""
    with pool.read() as conn:
        present = conn.execute(q.MIGRATIONS_PRESENT).fetchone() is not None
        applied = _versions(conn) if present else set()
    refuse_unknown_versions(scripts, applied)
    if not missing_migrations(scripts, applied):
        return schema_version(applied)
    with pool.write() as conn:
        conn.execute(q.MIGRATIONS_TABLE)
        applied = _versions(conn)
        for version, script in missing_migrations(scripts, applied):
            for statement in _statements(script):
                conn.execute(statement)
            now = float(conn.execute(q.NOW).fetchone()[0])
            conn.execute(q.RECORD_MIGRATION, {"version": version, "now": now})
            applied.add(version)
    return schema_version(applied)


def _versions(conn: sqlite3.Connection) -> set[int]:
    """The versions recorded in the migrations table."""
    return {int(row[0]) for row in conn.execute(q.APPLIED_VERSIONS)}


def _statements(script: str) -> list[str]:
    """Split a migration script into statements without `executescript`, which would
    commit the surrounding `BEGIN IMMEDIATE` and break the all-or-nothing upgrade."""
    statements, buffer = [], ""
    for line in script.splitlines(keepends=True):
        if line.lstrip().startswith("--") and not buffer.strip():
            continue
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        statements.append(buffer.strip())
    return statements
