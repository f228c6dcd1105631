"""What a queue's tables hold on disk: their sizes and `pgstattuple`'s free space.

One place for the measure `bench.pressure` takes once its queue is drained
(`bench.pressure_figures.storage`) and `bench.cost` takes after a burst and a steady
flow (`bench.cost.storage`):

- per table, `pg_total_relation_size` (heap, TOAST, free space and visibility maps,
  indexes), `pg_table_size` (all but the indexes) and `pg_indexes_size`, and each index's
  own `pg_relation_size`;
- per table, `pgstattuple`'s split of its heap (contrib; created in the database if
  missing): live tuples, dead tuples and free space, each a percentage of the table's
  length. It reads every page, so it is exact, and not cheap on a large table.

A plain `VACUUM` (`vacuum`) makes dead tuples free space (what autovacuum would give
back) and returns only the empty pages at the heap's end to the file system; run with
no other session holding a snapshot, or it can remove nothing newer than that.
"""

from __future__ import annotations

import contextlib
from typing import Any

import psycopg
from psycopg import sql

Row = dict[str, Any]

TABLES = """
SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'm') ORDER BY c.relname
"""
SIZES = """
SELECT pg_total_relation_size(c.oid), pg_table_size(c.oid), pg_indexes_size(c.oid)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relname = %s
"""
INDEXES = """
SELECT i.relname, pg_relation_size(i.oid)
FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
JOIN pg_class c ON c.oid = x.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relname = %s ORDER BY i.relname
"""
SIZE_KEYS = ("total_bytes", "table_bytes", "index_bytes")
TUPLE_KEYS = ("tuples", "dead_tuples", "tuple_percent", "dead_tuple_percent", "free_percent")


def tables(conn: psycopg.Connection[Any], schema: str) -> list[str]:
    """Every table of `schema` (ordinary, partitioned, materialized views), by name."""
    return [str(r[0]) for r in conn.execute(TABLES, (schema,)).fetchall()]


def ensure_pgstattuple(conn: psycopg.Connection[Any]) -> None:
    """Create the extension in this database (a superuser's connection, in autocommit).
    Two sessions creating it at once: one of them meets a duplicate, which is the same."""
    with contextlib.suppress(psycopg.errors.UniqueViolation):
        conn.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")


def sizes(conn: psycopg.Connection[Any], schema: str, table: str) -> Row:
    """The table's bytes: total, table (heap, TOAST, maps), indexes, and each index's."""
    row = conn.execute(SIZES, (schema, table)).fetchone()
    if row is None:
        raise LookupError(f"no table {schema}.{table}")
    indexes = {str(r[0]): int(r[1]) for r in conn.execute(INDEXES, (schema, table)).fetchall()}
    return {**dict(zip(SIZE_KEYS, map(int, row), strict=True)), "indexes": indexes}


def free_space(conn: psycopg.Connection[Any], schema: str, table: str) -> Row:
    """`pgstattuple`'s live and dead tuples (counts, and percent of the table's length)
    and its free space, percent (`ensure_pgstattuple` first)."""
    row = conn.execute(
        "SELECT tuple_count, dead_tuple_count, tuple_percent, dead_tuple_percent,"
        " free_percent FROM pgstattuple(%s::regclass)",
        (sql.Identifier(schema, table).as_string(conn),),
    ).fetchone()
    assert row is not None
    counts = {"tuples": int(row[0]), "dead_tuples": int(row[1])}
    return {**counts, **{k: float(v) for k, v in zip(TUPLE_KEYS[2:], row[2:], strict=True)}}


def measure(conn: psycopg.Connection[Any], schema: str, names: list[str]) -> dict[str, Row]:
    """Each table's `sizes` and `free_space`, by name."""
    ensure_pgstattuple(conn)
    return {name: {**sizes(conn, schema, name), **free_space(conn, schema, name)} for name in names}


def vacuum(conn: psycopg.Connection[Any], schema: str, names: list[str]) -> None:
    """A plain VACUUM of each table (autocommit: VACUUM runs outside a transaction)."""
    for name in names:
        conn.execute(sql.SQL("VACUUM {}").format(sql.Identifier(schema, name)))


def growth(before: dict[str, Row], after: dict[str, Row], jobs: int) -> Row:
    """What the tables grew from `before` to `after` (`measure`'s), per job of `jobs`:
    in all (`bytes_per_job`), and per table, in all, its table's part (heap, TOAST and
    maps) and each of its indexes; with each table's percentages as they are `after`. A
    table `before` lacks grew from nothing."""
    per_table: dict[str, Row] = {}
    for name, now in after.items():
        then = before.get(name, {})
        grown = {k: now[k] - then.get(k, 0) for k in SIZE_KEYS}
        was = then.get("indexes", {})
        per_table[name] = {
            **grown,
            "bytes_per_job": grown["total_bytes"] / jobs if jobs else None,
            "table_bytes_per_job": grown["table_bytes"] / jobs if jobs else None,
            "indexes_per_job": {
                index: (size - was.get(index, 0)) / jobs if jobs else None
                for index, size in now["indexes"].items()
            },
            **{k: now[k] for k in TUPLE_KEYS if k in now},
        }
    total = sum(t["total_bytes"] for t in per_table.values())
    return {
        "jobs": jobs,
        "grown_bytes": total,
        "bytes_per_job": total / jobs if jobs else None,
        "tables": per_table,
    }
