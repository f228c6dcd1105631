"""Programs of statements: how a store operation is written once and run on any
connection (heartq's own, a caller's borrowed one, or a caller's asyncio one).

An operation that needs the rows of one statement to write the next (an enqueue that
checks dependencies, a finish that releases dependents) is a generator: it yields each
`Step` (a statement and its parameters), gets that statement's rows sent back, and
returns its answer (`Program`). `drive` and `drive_async` run one on a connection; the
logic itself never knows which connection it runs on.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from typing import Any, TypeVar

Statement = str | tuple[str, ...]
"""A statement, or several run in order (the last one's rows are its rows)."""
Step = tuple[Statement, dict[str, Any]]
"""A statement with its parameters."""
Rows = list[Any]
T = TypeVar("T")
Program = Generator[Step, Rows, T]
"""Statements to run in order, each one's rows sent back: what the program returns is its
answer."""


def each(steps: Sequence[Step]) -> Program[None]:
    """Statements whose rows nobody reads, as a program (`yield from` a plain list would
    refuse the rows sent back)."""
    for step in steps:  # noqa: UP028 - `yield from` a list refuses what is sent
        yield step


def run(conn: Any, statement: Statement, params: Mapping[str, Any]) -> Rows:
    """Run a statement (or each of a tuple of them, in order); the last one's rows."""
    for text in statement if isinstance(statement, tuple) else (statement,):
        cursor = conn.execute(text, params)
    return cursor.fetchall() if cursor.description else []


def drive(conn: Any, program: Program[T]) -> T:
    """Run `program` on `conn`, each step's rows sent back to it; what it returns."""
    try:
        step = next(program)
        while True:
            step = program.send(run(conn, *step))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def drive_async(conn: Any, program: Program[T]) -> T:
    """`drive` on an asyncio connection (psycopg's `AsyncConnection`)."""
    try:
        step = next(program)
        while True:
            statement, params = step
            for text in statement if isinstance(statement, tuple) else (statement,):
                cursor = await conn.execute(text, params)
            rows: Rows = await cursor.fetchall() if cursor.description else []
            step = program.send(rows)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
