"""The PostgreSQL dialect: the same protocol for workers on many machines.

Claims take rows with `FOR UPDATE SKIP LOCKED`, so workers never wait on each other's
claims; claim, heartbeat and finish are each one statement that commits by itself
(`write_each`: no BEGIN and COMMIT), with their execution audit in the same statement.
Reclaimers lock the rows they reclaim, skip the ones another reclaimer holds, and fence
their update on `(id, execution_id, status)`: each job is reclaimed exactly once. The
operations are written once in `store/sql/`; this object holds what PostgreSQL does its
own way there: pooled connections (`connection.py`), statements that read the
transaction's clock, lists bound as arrays, `NOTIFY` on enqueue, end and cancel (heard by
`notifications.py`), the heartbeat on the worker's lasting session (`session.py`), and
the keys a keyed claim locks (the claim itself is `store/sql/keyed.py`'s). Each method
answers and calls nothing of `store/sql/` back. SQL: `queries/` (the module `q`);
schema: `schema.py` and `migrations/`; liveness locks: `liveness.py`; the pool, the
lasting session and its LISTENs, as the store's `Link`: `link.py`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from heartq.store.postgres import borrowed, schema
from heartq.store.postgres import queries as q
from heartq.store.postgres.connection import ConnectionPool, translate
from heartq.store.postgres.notifications import Channels
from heartq.store.postgres.session import LastingSession
from heartq.store.sql.base import Lane, LockedRateKeys, Step, migration_scripts
from heartq.store.sql.statements import FairStatements, Statements


class PostgresDialect:
    """`Dialect` (`store/sql/base.py`) on a PostgreSQL schema. Thread-safe: every call
    takes a pooled connection."""

    q: Statements = q
    statements_commit_alone = True  # `write_each` commits each statement by itself
    fair: FairStatements | None = None  # CLAIM takes turns itself, lane by lane

    def __init__(
        self, pool: ConnectionPool, url: str, sessions: LastingSession, channels: Channels
    ) -> None:
        self.pool = pool
        self.url = url
        self.sessions = sessions
        self.channels = channels
        self.migrated = False

    # -- schema --------------------------------------------------------------------------
    def migrations(self) -> list[tuple[int, str]]:
        """This dialect's schema migrations, oldest first: `(version, script)` (a test
        steers which of them `migrate` runs by replacing this method)."""
        return migration_scripts("heartq.store.postgres")

    def migrate(self) -> int:
        """Bring the schema up to date (`Link.migrate`); its version."""
        version = schema.migrate(self.pool, self.pool.schema, self.migrations())
        self.migrated = True
        return version

    def ensure_schema(self) -> None:
        if not self.migrated:
            self.migrate()

    # -- transactions --------------------------------------------------------------------
    def write(self) -> contextlib.AbstractContextManager[Any]:
        return self.pool.transaction()

    def read(self) -> contextlib.AbstractContextManager[Any]:
        return self.pool.transaction()

    def write_each(self) -> contextlib.AbstractContextManager[Any]:
        return self.pool.autocommit()

    def by_position(self, conn: Any) -> Any:
        # Binary results: the claim's numbers and times come as their bytes, not as text
        # each to parse (psycopg's float from text is a `strtod`).
        return conn.cursor(row_factory=tuple_row, binary=True)

    def write_enqueue(self, jobs: int) -> contextlib.AbstractContextManager[Any]:
        return self.pool.transaction()

    @contextlib.contextmanager
    def write_renewal(self) -> Iterator[Any]:
        """The heartbeat rides the worker's lasting session (`SharedSession.lend`), not
        the pool, whose connections a busy worker on a slow link keeps busy for seconds
        (the heartbeat waited for one, timed out, and the worker looked gone); the pool
        while that session is down or behind a transaction-mode pooler (no search path
        on a direct session)."""
        session = self.sessions.current
        if session is None or self.pool.pooler.transaction:
            with self.pool.autocommit() as conn:
                yield conn
            return
        with session.lend() as lent:
            if lent is not None:
                try:
                    yield lent
                except psycopg.Error as exc:
                    raise translate(exc, self.url) from exc
                return
        with self.pool.autocommit() as conn:
            yield conn

    # -- values --------------------------------------------------------------------------
    def now(self, conn: Any, now: float | None) -> float:
        row = conn.execute(q.NOW, {"now": now}).fetchone()
        assert row is not None
        return float(row["now"])

    def clock(self, conn: Any, now: float | None) -> float | None:
        """`now` as given: the statements read `now()` themselves when it is None."""
        return now

    def vacuum_jobs(self, since: float) -> bool:
        with self.pool.autocommit() as conn:
            row = conn.execute(q.VACUUM_DUE, {"since": since}).fetchone()
            if row is None or not row["due"]:
                return False
            conn.execute(q.VACUUM_JOBS)
        return True

    def prune_lanes(self, idle: float) -> int:
        with self.pool.transaction() as conn:
            idle_lanes = conn.execute(q.IDLE_LANES, {"idle": idle, "now": None}).fetchall()
            if not idle_lanes:
                return 0
            lanes = [(r["queue"], r["priority"], r["fair_key"]) for r in idle_lanes]
            return int(conn.execute(q.DELETE_EMPTY_LANES, _lanes_params(lanes)).rowcount)

    def prune_claim_marks(self, conn: Any, clock: float | None) -> int:
        return int(conn.execute(q.PRUNE_CLAIM_MARKS, {"now": clock}).rowcount)

    def array(self, values: Sequence[str]) -> list[str]:
        return list(values)

    def batch(self, name: str, docs: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """One typed array per field, read with `unnest` (`queries/batches.py`)."""
        return q.BATCHES[name].pack(docs)

    def is_duplicate(self, exc: Exception) -> bool:
        return isinstance(exc, psycopg.errors.UniqueViolation)

    # -- enqueues, wake-ups and announcements --------------------------------------------
    def lone_insert(self, doc: dict[str, Any], clock: float | None) -> Step | None:
        """None: a lone job costs the batch statement no more than a statement of its own."""
        return None

    def lane_steps(self, lanes: Sequence[Lane]) -> list[Step]:
        """A lane is pruned only under its lock exclusive: held here, shared, it stays
        until the caller's transaction ends."""
        return [(q.ENTER_LANES, _lanes_params(lanes))] if lanes else []

    def open_lanes(self, lanes: Sequence[Lane]) -> None:
        if lanes:
            with self.pool.aside() as conn:
                conn.execute(q.OPEN_LANES, _lanes_params(lanes))

    def insert_and_wake(self, docs: list[dict[str, Any]], now: float | None) -> bool:
        """Jobs without a unique key, an eta or dependencies: inserted, and their queues
        woken, by one statement that commits by itself (one round trip instead of four)."""
        if any(
            d["unique_key"] is not None or d["run_at"] is not None or "depends_on" in d
            for d in docs
        ):
            return False
        params = {
            **self.batch("jobs", docs),
            "now": now,
            "channel": self.channels.wake,
            "due_channel": self.channels.due,
        }
        with self.pool.autocommit() as conn:
            conn.execute(q.INSERT_JOBS_WAKING, params)
        return True

    def wake_steps(self, queues: Iterable[str]) -> list[Step]:
        channel = self.channels.wake
        return [(q.NOTIFY, {"channel": channel, "queue": x}) for x in sorted(set(queues))]

    def due_steps(self, seconds: float) -> list[Step]:
        return [(q.NOTIFY_DUE, {"channel": self.channels.due, "seconds": seconds})]

    def announce_ended(self, conn: Any, job_ids: Sequence[str]) -> None:
        """In the ending transaction; or, after a `finish` whose statement committed by
        itself, at once after it and best effort: the jobs have ended whatever happens
        to the notification, and a waiter that misses one re-reads within a second."""
        if not job_ids:
            return
        params = {"channel": self.channels.ends, "ids": list(job_ids)}
        if not conn.autocommit:
            conn.execute(q.NOTIFY_ENDED, params)
            return
        with contextlib.suppress(psycopg.Error):
            conn.execute(q.NOTIFY_ENDED, params)

    def announce_cancel(self, conn: Any, worker_ids: Sequence[str]) -> None:
        """A NOTIFY per worker (payload: its id), delivered by the requesting commit."""
        for worker_id in sorted(set(worker_ids)):
            params = {"channel": self.channels.cancel, "worker_id": worker_id}
            conn.execute(q.NOTIFY_CANCEL, params)

    # -- keyed claims: the keys locked (what is claimed with them: `store/sql/keyed.py`) --
    def own_transaction(self, conn: Any) -> contextlib.AbstractContextManager[Any] | None:
        """A transaction where `conn` commits each statement by itself (`write_each`);
        behind a transaction-mode pooler the claim is one transaction already (a savepoint
        would only add 2 round trips): None."""
        return conn.transaction() if conn.autocommit else None

    def lock_concurrency_keys(self, conn: Any, params: dict[str, Any]) -> list[str]:
        """`CLAIM_KEYS`: READ COMMITTED and many claimers at once, so the keys of the first
        runnable jobs are locked for the transaction before their jobs are counted."""
        return [row["key"] for row in conn.execute(q.CLAIM_KEYS, params).fetchall()]

    def lock_rate_keys(self, conn: Any, params: dict[str, Any]) -> LockedRateKeys:
        """`CLAIM_RATE_KEYS`: the open rate keys and the concurrency keys of their first
        jobs, each with whether its lock was taken, and a `held` row when any
        rate-limited job is runnable here at all."""
        found = conn.execute(q.CLAIM_RATE_KEYS, params).fetchall()
        return LockedRateKeys(
            rate=[row["key"] for row in found if row["kind"] == "rate" and row["locked"]],
            concurrency=[
                row["key"] for row in found if row["kind"] == "concurrency" and row["locked"]
            ],
            contended=any(row["locked"] is False for row in found),
            held=any(row["kind"] == "held" for row in found),
        )

    # -- the caller's connections --------------------------------------------------------
    def borrow(self, connection: Any) -> contextlib.AbstractContextManager[Any]:
        return borrowed.borrowed(connection, self.pool.schema, self.url)

    def borrow_async(self, connection: Any) -> contextlib.AbstractAsyncContextManager[Any]:
        return borrowed.borrowed_async(connection, self.pool.schema, self.url)

    def task_scope(self, conn: Any) -> contextlib.AbstractContextManager[Any]:
        return borrowed.task_scope(conn, self.pool.schema)


def _lanes_params(lanes: Sequence[Lane]) -> dict[str, Any]:
    """Lanes as the statements bind them: an array of queues, one of priorities, one of
    fairness keys ('' for none)."""
    return {
        "queues": [lane[0] for lane in lanes],
        "priorities": [lane[1] for lane in lanes],
        "keys": [lane[2] for lane in lanes],
    }
