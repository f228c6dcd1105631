"""The SQLite dialect: the embedded default, for any number of processes on one machine.

Every write is one `BEGIN IMMEDIATE` transaction, so claims, renewals, finishes and
reclaims from many processes serialize on SQLite's write lock and each sees the others'
committed work: a job is claimed once, reclaimed once, finished once. The operations are
written once in `store/sql/`; this object holds what SQLite does its own way there:
connections (`connection.py`), hot writes and small enqueues that share a commit
(`SharedCommit` in `connection.py`), the clock taken once per transaction, lists bound as
JSON, a lone job bound by value, keyed claims without locks (one writer), and no
notifications (its workers and waiters poll; an enqueue in a worker's own process wakes
it at once, `App`'s local wake-ups). Each method answers and calls nothing of
`store/sql/` back. SQL: `queries/` (the module `q`); schema: `schema.py` and
`migrations/`; liveness locks: `liveness.py`; the connections as the store's `Link`:
`link.py`.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from heartq.store.sql.base import Lane, Step, migration_scripts, no_async_connection
from heartq.store.sql.statements import FairStatements, Statements
from heartq.store.sqlite import borrowed, schema
from heartq.store.sqlite import queries as q
from heartq.store.sqlite.connection import SHARED_ENQUEUE_JOBS, ConnectionPool
from heartq.store.sqlite.queries import fair


class SQLiteDialect:
    """`Dialect` (`store/sql/base.py`) on a SQLite file. Thread-safe: each thread uses
    its own connection."""

    q: Statements = q
    statements_commit_alone = False  # `write_each` is one transaction, shared or not
    fair: FairStatements | None = fair  # one writer: tags read and written at once

    def __init__(self, pool: ConnectionPool, url: str, path: Path) -> None:
        self.pool = pool
        self.url = url
        self.path = path
        self.migrated = False

    # -- schema --------------------------------------------------------------------------
    def migrations(self) -> list[tuple[int, str]]:
        """This dialect's schema migrations, oldest first: `(version, script)` (a test
        steers which of them `migrate` runs by replacing this method)."""
        return migration_scripts("heartq.store.sqlite")

    def migrate(self) -> int:
        """Bring the schema up to date (`Link.migrate`); its version."""
        version = schema.migrate(self.pool, self.migrations())
        self.migrated = True
        return version

    def ensure_schema(self) -> None:
        if not self.migrated:
            self.migrate()

    # -- transactions --------------------------------------------------------------------
    def write(self) -> contextlib.AbstractContextManager[Any]:
        return self.pool.write()

    def read(self) -> contextlib.AbstractContextManager[Any]:
        return self.pool.read()

    def write_each(self) -> contextlib.AbstractContextManager[Any]:
        """The worker's hot writes (claim, heartbeat, finish) may share one commit with
        those of the process's other threads (`SharedCommit`, `connection.py`)."""
        return self.pool.write(share=True)

    def by_position(self, conn: Any) -> Any:
        return conn

    def write_enqueue(self, jobs: int) -> contextlib.AbstractContextManager[Any]:
        """A small enqueue shares commits like the hot writes (`SharedCommit`): many
        threads enqueuing one job each pay one fsync for several. A large batch never
        joins: its inserts would hold up the writes waiting to commit with it."""
        return self.pool.write(share=jobs <= SHARED_ENQUEUE_JOBS)

    def write_renewal(self) -> contextlib.AbstractContextManager[Any]:
        """The heartbeat is a hot write like the others: no lasting session to ride."""
        return self.write_each()

    # -- values --------------------------------------------------------------------------
    def now(self, conn: Any, now: float | None) -> float:
        return float(now) if now is not None else float(conn.execute(q.NOW).fetchone()[0])

    def clock(self, conn: Any, now: float | None) -> float:
        """The database's time, read once: every statement of the transaction agrees."""
        return self.now(conn, now)

    def vacuum_jobs(self, since: float) -> bool:
        return False  # no dead row versions kept (`Dialect.vacuum_jobs`)

    def prune_lanes(self, idle: float) -> int:
        return 0  # no ready log (`Dialect.prune_lanes`)

    def prune_claim_marks(self, conn: Any, clock: float | None) -> int:
        """No claim marks (`Dialect.prune_claim_marks`); what it deletes instead are the
        fair shares' finishes their tier's clock has passed (a key's next job starts at
        the clock then, with or without its row)."""
        return int(conn.execute(fair.PRUNE_FAIR_FINISHES).rowcount)

    def array(self, values: Sequence[str]) -> str:
        return json.dumps(list(values))

    def batch(self, name: str, docs: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """The documents as one JSON text, read with `json_each`."""
        return {name: json.dumps(list(docs))}

    def is_duplicate(self, exc: Exception) -> bool:
        return isinstance(exc, sqlite3.IntegrityError) and "UNIQUE" in str(exc)

    # -- enqueues, wake-ups and announcements: none to send ------------------------------
    def lone_insert(self, doc: dict[str, Any], clock: float | None) -> Step | None:
        """One job (`enqueue` one at a time, the common case) is bound by value: 13 us less
        than parsing a JSON batch of one (measured)."""
        return (q.INSERT_JOB, dict(doc, now=clock))

    def lane_steps(self, lanes: Sequence[Lane]) -> list[Step]:
        return []  # no ready log (`Dialect.lane_steps`)

    def open_lanes(self, lanes: Sequence[Lane]) -> None:
        return None  # no ready log (`Dialect.open_lanes`)

    def insert_and_wake(self, docs: list[dict[str, Any]], now: float | None) -> bool:
        """No such statement: the enqueue opens a transaction."""
        return False

    def wake_steps(self, queues: Iterable[str]) -> list[Step]:
        """None: no cross-process notifications; workers poll."""
        return []

    def due_steps(self, seconds: float) -> list[Step]:
        """None: no cross-process notifications; workers poll."""
        return []

    def announce_ended(self, conn: Any, job_ids: Sequence[str]) -> None:
        """Nobody hears: waiters poll."""

    def announce_cancel(self, conn: Any, worker_ids: Sequence[str]) -> None:
        """Nobody hears: a worker's pulse reads its cancels every tick."""

    # -- keyed claims: one writer at a time, nothing to lock ------------------------------
    def own_transaction(self, conn: Any) -> None:
        """None: the claim is one `BEGIN IMMEDIATE` transaction already."""
        return None

    def lock_concurrency_keys(self, conn: Any, params: dict[str, Any]) -> None:
        """None: no other claimer can count a key's jobs while this one holds the write
        lock, so every key goes."""
        return None

    def lock_rate_keys(self, conn: Any, params: dict[str, Any]) -> None:
        """None: as `lock_concurrency_keys`."""
        return None

    # -- the caller's connections --------------------------------------------------------
    def borrow(self, connection: Any) -> contextlib.AbstractContextManager[Any]:
        return borrowed.borrowed(connection, self.path)

    def borrow_async(self, connection: Any) -> contextlib.AbstractAsyncContextManager[Any]:
        raise no_async_connection("SQLiteStore", connection)

    def task_scope(self, conn: Any) -> contextlib.AbstractContextManager[Any]:
        """The task writes on heartq's connection as it is."""
        return contextlib.nullcontext(conn)
