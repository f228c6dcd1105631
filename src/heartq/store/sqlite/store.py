"""The SQLite dialect: the embedded default, for any number of processes on one machine.

Every write is one `BEGIN IMMEDIATE` transaction, so claims, renewals, finishes and
reclaims from many processes serialize on SQLite's write lock and each sees the others'
committed work: a job is claimed once, reclaimed once, finished once. The operations are
written once in `store/sql/`; this module holds what SQLite does its own way:
connections (`connection.py`), the clock taken once per transaction, lists bound as JSON,
an ended attempt's execution written by a statement of its own before its job's, and
liveness locks that are lock files (`lock_files.py`). The SQL is in `queries.py`; the
schema in `migrations/`.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from heartq.model import LivenessChange, StaleWorker
from heartq.store.interface import LivenessHandle
from heartq.store.sql.base import (
    missing_migrations,
    refuse_unknown_versions,
    schema_version,
)
from heartq.store.sql.program import Step
from heartq.store.sql.store import SqlStore
from heartq.store.sqlite import borrowed, lock_files
from heartq.store.sqlite import queries as q
from heartq.store.sqlite.connection import (
    DEFAULT_BUSY_TIMEOUT,
    ConnectionPool,
    options_from_url,
    path_from_url,
)
from heartq.store.sqlite.shared_commit import SHARED_ENQUEUE_JOBS


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


class SQLiteStore(SqlStore):
    """`Store` on a SQLite file. Thread-safe: each thread uses its own connection."""

    q = q
    supports_notify = False
    liveness_grace = 0.0  # a free flock is a dead process: the kernel dropped it

    def __init__(self, url: str, *, busy_timeout: float | None = None) -> None:
        self.url = url
        self.path: Path = path_from_url(url)
        options = options_from_url(url)
        timeout = busy_timeout if busy_timeout is not None else options.busy_timeout
        self.pool = ConnectionPool(
            self.path,
            DEFAULT_BUSY_TIMEOUT if timeout is None else timeout,
            options.synchronous,
        )
        self._migrated = False

    # -- lifecycle -----------------------------------------------------------------------
    def migrate(self) -> int:
        """Bring the schema up to date; returns its version. Reads first: an up-to-date
        schema is left alone, without taking the write lock, so the first heartq call of
        a process can run while another connection holds that lock (an application's
        transaction that enqueues through its own connection)."""
        scripts = self.migrations()
        with self.pool.read() as conn:
            present = conn.execute(q.MIGRATIONS_PRESENT).fetchone() is not None
            applied = _versions(conn) if present else set()
        refuse_unknown_versions(scripts, applied)
        if not missing_migrations(scripts, applied):
            self._migrated = True
            return schema_version(applied)
        with self.pool.write() as conn:
            conn.execute(q.MIGRATIONS_TABLE)
            applied = _versions(conn)
            for version, script in missing_migrations(scripts, applied):
                for statement in _statements(script):
                    conn.execute(statement)
                conn.execute(q.RECORD_MIGRATION, {"version": version, "now": self._now(conn, None)})
                applied.add(version)
        self._migrated = True
        return schema_version(applied)

    def close(self) -> None:
        self.pool.close()

    # -- the dialect's hooks (see store/sql/base.py) -------------------------------------
    def _write(self) -> contextlib.AbstractContextManager[Any]:
        return self.pool.write()

    def _write_each(self) -> contextlib.AbstractContextManager[Any]:
        """The worker's hot writes (claim, heartbeat, finish) may share one commit with
        those of the process's other threads (`shared_commit.py`)."""
        return self.pool.write(share=True)

    def _write_enqueue(self, jobs: int) -> contextlib.AbstractContextManager[Any]:
        """A small enqueue shares commits like the hot writes (`shared_commit.py`): many
        threads enqueuing one job each pay one fsync for several. A large batch never
        joins: its inserts would hold up the writes waiting to commit with it."""
        return self.pool.write(share=jobs <= SHARED_ENQUEUE_JOBS)

    def _read(self) -> contextlib.AbstractContextManager[Any]:
        return self.pool.read()

    def _now(self, conn: Any, now: float | None) -> float:
        return float(now) if now is not None else float(conn.execute(q.NOW).fetchone()[0])

    def _clock(self, conn: Any, now: float | None) -> float:
        """The database's time, read once: every statement of the transaction agrees."""
        return self._now(conn, now)

    def _array(self, values: Sequence[str]) -> str:
        return json.dumps(list(values))

    def _is_duplicate(self, exc: Exception) -> bool:
        return isinstance(exc, sqlite3.IntegrityError) and "UNIQUE" in str(exc)

    def _insert_steps(self, docs: list[dict[str, Any]], clock: float | None) -> list[Step]:
        """One job (`enqueue` one at a time, the common case) is bound by value: 13 us less
        than parsing a JSON batch of one (measured); a batch is one JSON parameter."""
        if len(docs) == 1:
            return [(q.INSERT_JOB, dict(docs[0], now=clock))]
        return super()._insert_steps(docs, clock)

    def _borrow(self, connection: Any) -> contextlib.AbstractContextManager[Any]:
        return borrowed.borrowed(connection, self.path)

    def _claim_rows(self, conn: Any, params: dict[str, Any]) -> list[Any]:
        """A worker of one queue claims through `CLAIM_ONE_QUEUE`, a walk of that queue's
        claim index in its order: no sort of the backlog, and a plan statistics cannot
        turn into a skip-scan."""
        queues = set(json.loads(params["queues"]))
        if len(queues) == 1:
            return self._claim_with(conn, q.CLAIM_ONE_QUEUE, dict(params, queue=queues.pop()))
        return list(super()._claim_rows(conn, params))

    def _lock_free(self, namesake: Mapping[str, Any]) -> bool:
        """No lock file: nothing says it is alive."""
        return lock_files.is_dead(self.path, namesake["id"]) is not False

    def _forget_workers(self, worker_ids: Sequence[str]) -> None:
        """Remove the lock files of reclaimed workers whose lock is free."""
        for worker_id in worker_ids:
            if lock_files.is_dead(self.path, worker_id):
                lock_files.forget(self.path, worker_id)

    # -- liveness locks ------------------------------------------------------------------
    def liveness_hold(
        self, worker_id: str, on_change: Callable[[LivenessChange], None] | None = None
    ) -> LivenessHandle:
        """A lock file the kernel frees when the process dies; it is never lost while the
        process lives, so `on_change` is never called."""
        return lock_files.FileLivenessLock(self.path, worker_id)

    def liveness_probe(
        self, detected_by: str, now: float | None = None, observer: str | None = None
    ) -> list[StaleWorker]:
        """Reclaim the jobs of this host's active workers whose lock file is free."""
        self.ensure_schema()
        with self.pool.read() as conn:
            params = {"hostname": socket.gethostname()}
            candidates = [r["id"] for r in conn.execute(q.ACTIVE_WORKERS_ON_HOST, params)]
        dead = [wid for wid in candidates if lock_files.is_dead(self.path, wid)]
        if not dead:
            return []
        with self.pool.write() as conn:
            clock = self._clock(conn, now)
            found = self._reclaim_dead(conn, clock, dead, detected_by, observer)
        self._forget_workers(dead)
        return found

    def liveness_suspects(self) -> dict[str, float]:
        return {}

    def liveness_free(self, worker_ids: Sequence[str]) -> list[str]:
        """This host's active workers among `worker_ids` whose lock file is free (a lock
        file is only judged on the host whose kernel holds it)."""
        if not worker_ids:
            return []
        self.ensure_schema()
        with self.pool.read() as conn:
            params = {"hostname": socket.gethostname()}
            here = {r["id"] for r in conn.execute(q.ACTIVE_WORKERS_ON_HOST, params)}
        return [w for w in worker_ids if w in here and lock_files.is_dead(self.path, w)]

    def listen(self, on_wake: Callable[[], None]) -> LivenessHandle | None:
        """No cross-process notifications in SQLite: workers poll, and an enqueue in the
        worker's own process wakes it at once (`App`'s local wake-ups)."""
        return None

    def listen_ends(self, on_end: Callable[[str | None], None]) -> LivenessHandle | None:
        """No cross-process notifications in SQLite: waiters poll."""
        return None

    def listen_cancels(
        self, worker_id: str, on_cancel: Callable[[], None]
    ) -> LivenessHandle | None:
        """No cross-process notifications in SQLite: a worker's pulse reads its cancels
        every tick (`cancel_requests`)."""
        return None

    # -- for tests -----------------------------------------------------------------------
    def trace_statements(self, callback: Any) -> None:
        """Call `callback(sql)` for every statement this store runs (tests count them)."""
        self.pool.trace.append(callback)
        self.pool.enable_trace()
