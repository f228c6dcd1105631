"""Migrating a PostgreSQL schema: read first, then apply what is missing under the
migration lock.

Why apart from the dialect: a migration runs once per store, on a transaction of the
pool, with its own race (`SCHEMA_RACE_TRIES`); the dialect only remembers that it ran.
"""

from __future__ import annotations

import psycopg

from heartq.store.postgres import queries as q
from heartq.store.postgres.connection import ConnectionPool
from heartq.store.sql.base import (
    missing_migrations,
    refuse_unknown_versions,
    refused,
    schema_version,
)

SCHEMA_RACE_TRIES = 3
"""Times a migration runs before its duplicate-key error is raised. Migrators of one
fresh schema wait for each other's lock (`MIGRATION_START`), and the later ones find the
schema made (`CREATE SCHEMA IF NOT EXISTS`), except on a server session that looked for
it while the first one was making it: behind a transaction-mode pooler, whose sessions
serve every client, that session's catalog cache still called it missing after the lock,
and `CREATE SCHEMA` failed on the duplicate (1 round in 10 to 25 of 4 processes migrating
25 fresh schemas together). A new transaction sees it."""


def migrate(pool: ConnectionPool, schema: str, scripts: list[tuple[int, str]]) -> int:
    """Bring `schema` up to date with `scripts`; returns its version. Reads first: an
    up-to-date schema is left alone, without a lock or a write, so a read-only role can
    use it."""
    applied = _applied_versions(pool, schema)
    if applied is not None:
        refuse_unknown_versions(scripts, applied)
    if applied is None or missing_migrations(scripts, applied):
        applied = _apply(pool, schema, scripts)
    return schema_version(applied)


def _applied_versions(pool: ConnectionPool, schema: str) -> set[int] | None:
    """The schema's applied migrations, or None if it has no `schema_migrations` table
    yet."""
    with pool.transaction() as conn:
        row = conn.execute(q.MIGRATIONS_PRESENT, {"schema": schema}).fetchone()
        if not row or not row["present"]:
            return None
        table = psycopg.sql.Identifier(schema, "schema_migrations")
        rows = conn.execute(psycopg.sql.SQL("SELECT version FROM {}").format(table))
        return {int(r["version"]) for r in rows.fetchall()}


def _apply(pool: ConnectionPool, schema: str, scripts: list[tuple[int, str]]) -> set[int]:
    """Apply what is missing, under the migration lock, again if a racing migrator's
    schema was seen missing (`SCHEMA_RACE_TRIES`)."""
    for attempt in range(1, SCHEMA_RACE_TRIES + 1):
        try:
            return _apply_once(pool, schema, scripts)
        except psycopg.errors.UniqueViolation:
            if attempt == SCHEMA_RACE_TRIES:
                raise
    raise AssertionError("unreachable")


def _apply_once(pool: ConnectionPool, schema: str, scripts: list[tuple[int, str]]) -> set[int]:
    name = psycopg.sql.Identifier(schema)
    with pool.transaction() as conn:
        conn.execute(q.MIGRATION_START)
        conn.execute(psycopg.sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(name))
        conn.execute(q.MIGRATIONS_TABLE)
        applied = {int(r["version"]) for r in conn.execute(q.APPLIED_VERSIONS).fetchall()}
        for version, script in missing_migrations(scripts, applied):
            try:
                conn.execute(script.encode())
            except psycopg.errors.RaiseException as exc:  # a migration refusing the data
                raise refused(version, exc.diag.message_primary or str(exc)) from None
            except psycopg.errors.DependentObjectsStillExist as exc:  # an operator's view
                why = f"{exc.diag.message_primary} ({exc.diag.message_detail})"
                raise refused(version, why.replace("\n", "; ")) from None
            conn.execute(q.RECORD_MIGRATION, {"version": version})
            applied.add(version)
    return applied
