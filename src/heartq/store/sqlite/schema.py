"""Migrating a SQLite file: read first, then apply what is missing in one `BEGIN
IMMEDIATE` transaction, after giving a file of SQLite's old numbering the numbers of the
one line.

Why apart from the dialect: a migration runs once per store, with its own way of
splitting scripts; the dialect only remembers that it ran.

**One line of numbers.** A number names the same change on both backends; where SQLite
needs nothing, its file of that number says why and holds no statement, and is recorded
like any other. Before that, SQLite's migrations were numbered apart: they skipped 12, 15
and 19 (changes only PostgreSQL needed), and their 23 and 24 were PostgreSQL's 24 and 25
(PostgreSQL's 23 came first, for PostgreSQL alone); 29 was 29 already. A file migrated then
is recognised by what it recorded: a version above 12, and not 12, which the one line
records on every file that has one above it. Its two shifted rows are given their new
numbers (`OLD_NUMBERS`, newest first, each keeping its time) in the transaction that then
applies what is missing, and never again: the same transaction records 12. Whatever
stops that transaction leaves the file as it was, to be renumbered by the next try.

A heartq of the old numbering meeting a renumbered file is refused at its first call, in
one line, by its own check (`refuse_unknown_versions`: 12, 15, 19 and 25 to 28 are
versions it does not know); a file whose records fit neither numbering is refused here,
in one line, rather than migrated by a guess.
"""

from __future__ import annotations

import sqlite3

from heartq.errors import ConfigError
from heartq.store.sql.base import (
    missing_migrations,
    refuse_unknown_versions,
    refused,
    schema_version,
)
from heartq.store.sqlite import queries as q
from heartq.store.sqlite.connection import ConnectionPool

OLD_LINE = frozenset({*range(1, 12), 13, 14, 16, 17, 18, 20, 21, 22, 23, 24, 29})
"""Every version SQLite's old numbering had."""

OLD_NUMBERS = {24: 25, 23: 24}
"""The versions of the old numbering that the one line numbers otherwise, newest first (so
that no row takes a number another still holds): 23, a succeeded attempt on its job's row;
24, the worker's lease."""

FIRST_SKIPPED = 12
"""The first number the old numbering skipped: every file of the one line that recorded a
later version recorded this one too."""


def migrate(pool: ConnectionPool, scripts: list[tuple[int, str]]) -> int:
    """Bring the file's schema up to date with `scripts`; returns its version. Reads
    first: an up-to-date schema is left alone, without taking the write lock, so the
    first heartq call of a process can run while another connection holds that lock (an
    application's transaction that enqueues through its own connection). A file of the
    old numbering is never up to date (it lacks 12): it is renumbered under the lock."""
    with pool.read() as conn:
        present = conn.execute(q.MIGRATIONS_PRESENT).fetchone() is not None
        applied = _versions(conn) if present else set()
    applied = one_line(applied)
    refuse_unknown_versions(scripts, applied)
    if not missing_migrations(scripts, applied):
        return schema_version(applied)
    with pool.write() as conn:
        conn.execute(q.MIGRATIONS_TABLE)
        applied = _renumber(conn, _versions(conn))
        refuse_unknown_versions(scripts, applied)
        for version, script in missing_migrations(scripts, applied):
            for statement in _statements(script):
                try:
                    conn.execute(statement)
                except sqlite3.IntegrityError as exc:  # a migration refusing the data
                    raise refused(version, str(exc)) from None
            now = float(conn.execute(q.NOW).fetchone()[0])
            conn.execute(q.RECORD_MIGRATION, {"version": version, "now": now})
            applied.add(version)
    return schema_version(applied)


def one_line(recorded: set[int]) -> set[int]:
    """The versions a file recorded, as the one line numbers them (the same set for a file
    of the one line). `ConfigError` for records of neither numbering."""
    if FIRST_SKIPPED in recorded or max(recorded, default=0) < FIRST_SKIPPED:
        return set(recorded)
    strange = sorted(recorded - OLD_LINE)
    if strange:
        raise ConfigError(
            f"the queue's schema records migration {', '.join(map(str, strange))} but not"
            f" {FIRST_SKIPPED}, which neither heartq's numbering of SQLite's migrations"
            " does: it was not migrated by a released heartq (docs/UPGRADING.md)"
        )
    return {OLD_NUMBERS.get(version, version) for version in recorded}


def _renumber(conn: sqlite3.Connection, recorded: set[int]) -> set[int]:
    """Give a file of the old numbering the numbers of the one line, in `conn`'s
    transaction; the versions it then records."""
    applied = one_line(recorded)
    if applied != recorded:
        for old, new in OLD_NUMBERS.items():
            conn.execute(q.RENUMBER_MIGRATION, {"old": old, "new": new})
    return applied


def _versions(conn: sqlite3.Connection) -> set[int]:
    """The versions recorded in the migrations table."""
    return {int(row[0]) for row in conn.execute(q.APPLIED_VERSIONS)}


def _statements(script: str) -> list[str]:
    """Split a migration script into statements without `executescript`, which would
    commit the surrounding `BEGIN IMMEDIATE` and break the all-or-nothing upgrade. A
    script of comments alone (a change this backend does not need) has none."""
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
