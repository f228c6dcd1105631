"""Migrated PostgreSQL schemas made by copying one, for `pg_harness.SchemaStock`.

A test's schema must be as a migration leaves a fresh one. Running the migrations for
each (38 scripts and counting, one transaction: 0.15-0.4 s of the server's CPU, more under load, for
each of the 700-odd schemas of a run) was the largest single cost of the default suite's
PostgreSQL tests: the stock's thread could not keep ahead of the conformance tests, each
of which then waited for its migration, while the DDL took the cores the other test
processes wanted. A copy replays the final DDL of one schema the migrations made, as
`pg_dump --schema-only` writes it (one script: its tables, indexes, view, functions and
triggers, with their storage settings), then writes the rows a migration writes: the
versions applied (`schema_migrations`) and a deployment id of the copy's own, made by
the migration that makes it (its script inserts one only where there is none). About a
quarter of the cost (0.07-0.13 s against 0.30-0.47 s on a loaded 2-core machine), and
the same schema: tests/harness/test_schemas.py compares a copy with a migrated schema
(every catalog object as pg_dump writes it, every column slot, every table's rows), so
a migration whose result a copy would miss fails there.

No migration drops a column (a copy would lack the dropped column's slot in each row;
the same test would say so). Where no `pg_dump` runs (no PostgreSQL binaries, or a
server newer than them), `Template.made` returns None and the stock migrates each
schema as before.
"""

from __future__ import annotations

import subprocess
from typing import LiteralString

import psycopg
from psycopg import sql

from bench.servers import postgres
from tests.support import DEPLOYMENT_MIGRATION

PG_DUMP_TIMEOUT = 60


def _dump(url: str) -> str | None:
    """The DDL of `url`'s schema as `pg_dump` writes it (no owners, no grants), or None
    where no pg_dump can dump it."""
    bin_dir = postgres.pg_bin_dir()
    if bin_dir is None or not (bin_dir / "pg_dump").exists():
        return None
    base, schema = url.rsplit("?schema=", 1)
    try:
        command = [str(bin_dir / "pg_dump"), "--schema-only", "--no-owner", "--no-privileges",
                   f"--schema={schema}", f"--dbname={base}"]  # fmt: skip
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=PG_DUMP_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    # psql's meta-commands (`\restrict`, newer pg_dumps) are not SQL; the rest runs as is.
    return "\n".join(line for line in done.stdout.splitlines() if not line.startswith("\\"))


class Template:
    """A migrated schema's DDL and applied versions, copied under new names (`copy`)."""

    def __init__(self, schema: str, ddl: str, versions: list[int], deployment: str) -> None:
        self.schema = schema
        self.ddl = ddl
        self.versions = versions
        self.deployment = deployment

    @classmethod
    def made(cls, url: str, scripts: list[tuple[int, str]]) -> Template | None:
        """The template of `url`'s schema (migrated with `scripts`, and left unchanged
        from now on), or None where it cannot be dumped."""
        ddl = _dump(url)
        if ddl is None:
            return None
        base, schema = url.rsplit("?schema=", 1)
        with psycopg.connect(base, autocommit=True) as conn:
            table = sql.Identifier(schema, "schema_migrations")
            rows = conn.execute(sql.SQL("SELECT version FROM {} ORDER BY version").format(table))
            versions = [int(version) for (version,) in rows]
        deployment = dict(scripts)[DEPLOYMENT_MIGRATION]
        return cls(schema, ddl, versions, deployment)

    def copy(self, url: str) -> None:
        """Make `url`'s schema (not there yet) a copy of the template, in one transaction:
        no session sees it half made."""
        base, schema = url.rsplit("?schema=", 1)
        # The names are the harness's own (`hqt_<token>_<12 hex digits>`): the template's
        # occurs in the DDL only where it names the schema.
        ddl = self.ddl.replace(self.schema, schema)
        name = sql.Identifier(schema)
        record: LiteralString = "INSERT INTO {}.schema_migrations (version) SELECT unnest(%s)"
        with (
            psycopg.connect(base, autocommit=True, application_name="heartq-tests copy") as conn,
            conn.transaction(),
        ):
            conn.execute(ddl.encode())  # its own session settings: this session's end
            conn.execute(sql.SQL(record).format(name), (self.versions,))
            conn.execute(sql.SQL("SET LOCAL search_path = {}").format(name))
            conn.execute(self.deployment.encode())
