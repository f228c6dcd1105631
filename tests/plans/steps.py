"""SQLite's virtual machine steps, counted: the work a statement does, whatever the
machine's load (a plan test's bound on SQLite, as buffers are on PostgreSQL)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator


@contextlib.contextmanager
def counting_steps(conn: sqlite3.Connection, every: int = 1) -> Iterator[list[int]]:
    """Count the steps `conn` runs in the block, in units of `every` steps (a coarser
    count costs the run less): the one-element list holds the count, read after."""
    steps = [0]

    def step() -> int:
        steps[0] += 1
        return 0

    conn.set_progress_handler(step, every)
    try:
        yield steps
    finally:
        conn.set_progress_handler(None, 0)
