"""Connections heartq does not own: the caller's, for an enqueue inside the caller's
transaction, and its own, lent to a task inside `ctx.transaction()`.

heartq's statements name its tables plainly and find them through `search_path` (its
schema). On a caller's connection the search path is set to heartq's schema for heartq's
statements only (`set_config(..., is_local => true)`, so even an error cannot leak it past
the transaction) and put back as it was. A task writing its effects on heartq's own
connection gets PostgreSQL's default search path (`"$user", public`) for its own
statements, so a table of its named like one of heartq's is its own, never heartq's.

Rows read by column name, JSON columns and job ids come back as text, as on heartq's own
connections: a cursor of their own carries those adapters, the caller's connection is
left as it was.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
from psycopg import pq
from psycopg.rows import dict_row

from heartq.errors import ConfigError
from heartq.store.postgres import queries as q
from heartq.store.postgres.adapters import (
    read_uuids_as_job_ids,
    read_uuids_as_psycopg_does,
    register_loaders,
)

JOINABLE = (pq.TransactionStatus.IDLE, pq.TransactionStatus.INTRANS)
"""In a transaction, or idle with `autocommit` off (heartq's first statement begins the
transaction the caller then commits)."""


def _check(connection: Any, kind: type[Any], what: str) -> None:
    if not isinstance(connection, kind):
        raise ConfigError(
            f"a PostgreSQL queue enqueues in a transaction of {what}, not "
            f"{type(connection).__name__}"
        )
    status = connection.info.transaction_status
    if status not in JOINABLE or (status == pq.TransactionStatus.IDLE and connection.autocommit):
        why = {
            pq.TransactionStatus.INERROR: "its transaction failed (roll it back first)",
            pq.TransactionStatus.ACTIVE: "a statement is running on it",
            pq.TransactionStatus.IDLE: "it is in autocommit mode with no open transaction "
            "(use `with conn.transaction():`), so the job would be committed on its own",
        }.get(status, f"it is {status.name.lower()}")
        raise ConfigError(f"cannot enqueue in this connection's transaction: {why}")


def _cursor(connection: Any) -> Any:
    cursor = connection.cursor(row_factory=dict_row)
    register_loaders(cursor.adapters)
    return cursor


def _search_path(found: dict[str, Any], schema: str, queue: str) -> str:
    """The caller's search path, to put back; a `ConfigError` when the connection is on a
    database where heartq's schema holds no queue (another database than the queue's)."""
    if not found["has_queue"]:
        raise ConfigError(
            f"the connection is on database {found['database']!r}, where schema {schema!r} "
            f"holds no heartq queue: open it on the queue's database ({queue})"
        )
    return str(found["search_path"])


@contextlib.contextmanager
def borrowed(connection: Any, schema: str, queue: str) -> Iterator[psycopg.Cursor[Any]]:
    """A cursor of the caller's `psycopg.Connection` that sees heartq's schema (`queue`:
    the queue's URL as an error may show it)."""
    _check(connection, psycopg.Connection, "a psycopg.Connection")
    with _cursor(connection) as cursor:
        found = cursor.execute(q.CALLERS_CONNECTION, {"schema": schema}).fetchone()
        previous = _search_path(found, schema, queue)
        cursor.execute(q.SET_SEARCH_PATH, {"search_path": schema})
        yield cursor
        cursor.execute(q.SET_SEARCH_PATH, {"search_path": previous})


@contextlib.asynccontextmanager
async def borrowed_async(
    connection: Any, schema: str, queue: str
) -> AsyncIterator[psycopg.AsyncCursor[Any]]:
    """`borrowed` for a `psycopg.AsyncConnection`."""
    _check(connection, psycopg.AsyncConnection, "a psycopg.AsyncConnection")
    async with _cursor(connection) as cursor:
        await cursor.execute(q.CALLERS_CONNECTION, {"schema": schema})
        previous = _search_path(await cursor.fetchone(), schema, queue)
        await cursor.execute(q.SET_SEARCH_PATH, {"search_path": schema})
        yield cursor
        await cursor.execute(q.SET_SEARCH_PATH, {"search_path": previous})


@contextlib.contextmanager
def task_scope(conn: psycopg.Connection[Any], schema: str) -> Iterator[psycopg.Connection[Any]]:
    """heartq's own connection, lent to a task with PostgreSQL's defaults for the task's
    transaction (the search path, the plan cache's mode: `TASK_DEFAULTS`) and psycopg's
    own cursors (heartq's `NamedCursor` binds by position, which a task's `executemany`,
    `copy` or `stream` with `%s` placeholders would not survive), and a `uuid` read as
    psycopg reads it (its tables' own, not job ids); its own again
    (heartq's schema, its plans, its cursors: `TASK_DONE`) once the task's block ended
    without an error."""
    conn.execute(q.TASK_DEFAULTS)
    ours = conn.cursor_factory
    conn.cursor_factory = psycopg.Cursor
    read_uuids_as_psycopg_does(conn.adapters)
    try:
        yield conn
    finally:
        conn.cursor_factory = ours
        read_uuids_as_job_ids(conn.adapters)
    conn.execute(q.TASK_DONE, {"search_path": schema})
