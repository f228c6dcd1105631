"""The PostgreSQL dialect: the same protocol for workers on many machines.

Claims take rows with `FOR UPDATE SKIP LOCKED`, so workers never wait on each other's
claims; claim, heartbeat and finish are each one statement (with their execution audit
in the same statement). Reclaimers lock the rows they reclaim, skip the ones another
reclaimer holds, and fence their update on `(id, execution_id, status)`: each job is
reclaimed exactly once. The operations are written once in `store/sql/`; this module
holds what PostgreSQL does its own way: pooled connections (`connection.py`), statements
that read the transaction's clock, lists bound as arrays, `NOTIFY` on enqueue (heard by
`session.py`), and liveness locks that are session advisory locks (`advisory_locks.py`), held
on the same session as the LISTENs (`session.py`). SQL: `queries.py`; schema:
`migrations/`.

Behind a connection pooler in transaction mode (`pooler.py`) there is no lasting session
unless a direct URL gives one: then workers hold no liveness lock (`NoLock`, recorded in
their row so no probe tries it), nobody LISTENs (`supports_notify` False: workers poll
for jobs, their pulse reads cancels, `App.result` re-reads), and the NOTIFYs enqueues
send still wake whoever listens on a direct session.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import psycopg

from heartq.model import LivenessChange, StaleWorker
from heartq.store.interface import LivenessHandle
from heartq.store.postgres import borrowed
from heartq.store.postgres import queries as q
from heartq.store.postgres.advisory_locks import LIVENESS_GRACE, LIVENESS_RESTART_QUIET
from heartq.store.postgres.connection import ConnectionPool, translate
from heartq.store.postgres.pooler import NoLock
from heartq.store.postgres.session import SharedSession
from heartq.store.redaction import redact
from heartq.store.sql.base import (
    missing_migrations,
    refuse_unknown_versions,
    schema_version,
)
from heartq.store.sql.program import Step
from heartq.store.sql.store import SqlStore

Conn = psycopg.Connection[Any]

SCHEMA_RACE_TRIES = 3
"""Times a migration runs before its duplicate-key error is raised. Migrators of one
fresh schema wait for each other's lock (`MIGRATION_START`), and the later ones find the
schema made (`CREATE SCHEMA IF NOT EXISTS`), except on a server session that looked for
it while the first one was making it: behind a transaction-mode pooler, whose sessions
serve every client, that session's catalog cache still called it missing after the lock,
and `CREATE SCHEMA` failed on the duplicate (1 round in 10 to 25 of 4 processes migrating
25 fresh schemas together). A new transaction sees it."""


class PostgresStore(SqlStore):
    """`Store` on PostgreSQL. Thread-safe: every call takes a pooled connection."""

    q = q
    _statements_commit_alone = True  # `_write_each` commits each statement by itself

    def __init__(self, url: str, pool_size: int | None = None) -> None:
        self.pool = ConnectionPool(url, pool_size)
        self.supports_notify = self.pool.sessions
        self.holds_liveness_lock = self.pool.sessions
        self.url = redact(url)
        self.schema = self.pool.schema
        self.channel = f"heartq_{self.schema}"
        self.ends_channel = f"heartq_{self.schema}_ended"
        self.cancel_channel = f"heartq_{self.schema}_cancel"
        self._migrated = False
        self.liveness_restart_quiet = LIVENESS_RESTART_QUIET
        self.liveness_grace = LIVENESS_GRACE
        self._session: SharedSession | None = None
        self._session_lock = threading.Lock()

    # -- lifecycle -----------------------------------------------------------------------
    def migrate(self) -> int:
        """Bring the schema up to date; returns its version. Reads first: an up-to-date
        schema is left alone, without a lock or a write, so a read-only role can use it."""
        scripts = self.migrations()
        applied = self._applied_versions()
        if applied is not None:
            refuse_unknown_versions(scripts, applied)
        if applied is None or missing_migrations(scripts, applied):
            applied = self._apply(scripts)
        self._migrated = True
        return schema_version(applied)

    def _applied_versions(self) -> set[int] | None:
        """The schema's applied migrations, or None if it has no `schema_migrations` table
        yet."""
        with self.pool.transaction() as conn:
            row = conn.execute(q.MIGRATIONS_PRESENT, {"schema": self.schema}).fetchone()
            if not row or not row["present"]:
                return None
            table = psycopg.sql.Identifier(self.schema, "schema_migrations")
            rows = conn.execute(psycopg.sql.SQL("SELECT version FROM {}").format(table))
            return {int(r["version"]) for r in rows.fetchall()}

    def _apply(self, scripts: list[tuple[int, str]]) -> set[int]:
        """Apply what is missing, under the migration lock, again if a racing migrator's
        schema was seen missing (`SCHEMA_RACE_TRIES`)."""
        for attempt in range(1, SCHEMA_RACE_TRIES + 1):
            try:
                return self._apply_once(scripts)
            except psycopg.errors.UniqueViolation:
                if attempt == SCHEMA_RACE_TRIES:
                    raise
        raise AssertionError("unreachable")

    def _apply_once(self, scripts: list[tuple[int, str]]) -> set[int]:
        schema = psycopg.sql.Identifier(self.schema)
        with self.pool.transaction() as conn:
            conn.execute(q.MIGRATION_START)
            conn.execute(psycopg.sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema))
            conn.execute(q.MIGRATIONS_TABLE)
            applied = {int(r["version"]) for r in conn.execute(q.APPLIED_VERSIONS).fetchall()}
            for version, script in missing_migrations(scripts, applied):
                conn.execute(script.encode())
                conn.execute(q.RECORD_MIGRATION, {"version": version})
                applied.add(version)
        return applied

    def close(self) -> None:
        with self._session_lock:
            session, self._session = self._session, None
        if session is not None:
            session.close()
        self.pool.close()

    def reach(self) -> None:
        """One connection attempt of its own: its failure is known at once (the pool
        would retry in the background until its timeout)."""
        self.pool.reach()

    def resize_pool(self, size: int) -> None:
        self.pool.resize(size)

    # -- the dialect's hooks (see store/sql/base.py) -------------------------------------
    def _write(self) -> contextlib.AbstractContextManager[Any]:
        return self.pool.transaction()

    def _read(self) -> contextlib.AbstractContextManager[Any]:
        return self.pool.transaction()

    def _write_each(self) -> contextlib.AbstractContextManager[Any]:
        return self.pool.autocommit()

    @contextlib.contextmanager
    def _write_renewal(self) -> Iterator[Any]:
        """The heartbeat rides the worker's lasting session (`SharedSession.lend`), not
        the pool, whose connections a busy worker on a slow link keeps busy for seconds
        (the heartbeat waited for one, timed out, and the worker looked dead); the pool
        while that session is down or behind a transaction-mode pooler (no search path
        on a direct session)."""
        session = self._session
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

    def _now(self, conn: Any, now: float | None) -> float:
        row = conn.execute(q.NOW, {"now": now}).fetchone()
        assert row is not None
        return float(row["now"])

    def _clock(self, conn: Any, now: float | None) -> float | None:
        """`now` as given: the statements read `now()` themselves when it is None."""
        return now

    def _array(self, values: Sequence[str]) -> list[str]:
        return list(values)

    def _is_duplicate(self, exc: Exception) -> bool:
        return isinstance(exc, psycopg.errors.UniqueViolation)

    def _claim_rows(self, conn: Any, params: dict[str, Any]) -> list[Any]:
        """A worker of one queue claims through `CLAIM_ONE_QUEUE`, a plain walk of that
        queue's claim index (a third cheaper than CLAIM's per-queue walks)."""
        queues = set(params["queues"])
        if len(queues) == 1:
            one = dict(params, queue=queues.pop())
            return list(conn.execute(q.CLAIM_ONE_QUEUE, one).fetchall())
        return super()._claim_rows(conn, params)

    def _claim_limited(
        self, conn: Any, params: dict[str, Any]
    ) -> tuple[list[Any], float | None]:
        """In one transaction (READ COMMITTED, many claimers), each kind of key in two
        statements: the keys of the first runnable jobs are locked for the transaction,
        those another claimer holds skipped; then a new statement, whose snapshot is
        taken after the locks and so sees every claim of those keys committed before
        them, counts and claims. Concurrency keys first (`CLAIM_KEYS`, `CLAIM_KEYED`),
        then, slots left, rate keys with the concurrency keys of their jobs
        (`CLAIM_RATE_KEYS`, `CLAIM_RATED`), and the rate wait (`RATE_WAIT`) only when a
        rate-limited job is runnable at all: an idle worker's poll pays one probe of
        each empty index, in one transaction.

        The claim's unkeyed jobs are committed by then (`_write_each`): if this fails
        after some were taken, they are handed over all the same and the keyed jobs wait
        for the next claim (which raises the error if it persists, once nothing unkeyed
        is left to take)."""
        # The keys' locks last until the claim commits: a transaction of its own where
        # the claim's statements commit by themselves; behind a transaction-mode pooler
        # the claim is one transaction already (a savepoint would only add 2 round trips).
        own = conn.transaction() if conn.autocommit else contextlib.nullcontext()
        try:
            with own:
                keys = [row["key"] for row in conn.execute(q.CLAIM_KEYS, params).fetchall()]
                rows: list[Any] = []
                if keys:
                    rows = list(conn.execute(q.CLAIM_KEYED, dict(params, keys=keys)).fetchall())
                left = params["limit"] - len(rows)
                if left <= 0:
                    return rows, None
                found = conn.execute(q.CLAIM_RATE_KEYS, dict(params, limit=left)).fetchall()
                locked: dict[str, list[str]] = {"rate": [], "concurrency": list(keys)}
                for row in found:
                    if row["locked"]:
                        locked[row["kind"]].append(row["key"])
                return self._claim_rated(
                    conn,
                    params,
                    rows,
                    keys=locked,
                    contended=any(row["locked"] is False for row in found),
                    held=any(row["kind"] == "held" for row in found),
                )
        except psycopg.Error:
            if conn.autocommit and params["claimed"]:
                return [], None
            raise

    def _insert_and_wake(self, docs: list[dict[str, Any]], now: float | None) -> bool:
        if any(
            d["unique_key"] is not None or d["run_at"] is not None or "depends_on" in d
            for d in docs
        ):
            return False
        params = {"jobs": json.dumps(docs), "now": now, "channel": self.channel}
        with self.pool.autocommit() as conn:
            conn.execute(q.INSERT_JOBS_WAKING, params)
        return True

    def _wake_steps(self, queues: Iterable[str]) -> list[Step]:
        return [(q.NOTIFY, {"channel": self.channel, "queue": x}) for x in sorted(set(queues))]

    def _borrow(self, connection: Any) -> contextlib.AbstractContextManager[Any]:
        return borrowed.borrowed(connection, self.schema)

    def _borrow_async(self, connection: Any) -> contextlib.AbstractAsyncContextManager[Any]:
        return borrowed.borrowed_async(connection, self.schema)

    def _task_scope(self, conn: Any) -> contextlib.AbstractContextManager[Any]:
        return borrowed.task_scope(conn, self.schema)

    def _announce_ended(self, conn: Any, job_ids: Sequence[str]) -> None:
        """In the ending transaction; or, after a `finish` whose statement committed by
        itself, at once after it and best effort: the jobs have ended whatever happens
        to the notification, and a waiter that misses one re-reads within a second."""
        if not job_ids:
            return
        params = {"channel": self.ends_channel, "ids": list(job_ids)}
        if not conn.autocommit:
            conn.execute(q.NOTIFY_ENDED, params)
            return
        with contextlib.suppress(psycopg.Error):
            conn.execute(q.NOTIFY_ENDED, params)

    def _announce_cancel(self, conn: Any, worker_ids: Sequence[str]) -> None:
        """A NOTIFY per worker (payload: its id), delivered by the requesting commit."""
        for worker_id in sorted(set(worker_ids)):
            conn.execute(q.NOTIFY_CANCEL, {"channel": self.cancel_channel, "worker_id": worker_id})

    # -- liveness locks and wake-ups -----------------------------------------------------
    def _shared_session(self) -> SharedSession:
        """The session this store's liveness locks and LISTENs share (a new one once the
        last user of the previous one let it go)."""
        with self._session_lock:
            if self._session is None or self._session.closed:
                self._session = SharedSession(self.pool.connect)
            return self._session

    def liveness_hold(
        self, worker_id: str, on_change: Callable[[LivenessChange], None] | None = None
    ) -> LivenessHandle:
        """Hold `worker_id`'s liveness lock on the store's shared session (`session.py`);
        behind a transaction-mode pooler without a direct URL, none (`NoLock`)."""
        if not self.holds_liveness_lock:
            return NoLock()
        while True:
            handle = self._shared_session().hold_lock(worker_id, on_change or _ignore)
            if handle is not None:
                return handle

    def _listen(
        self, channel: str, on_notify: Callable[[str | None], None]
    ) -> LivenessHandle | None:
        """LISTEN on the shared session; None without one (behind a transaction-mode
        pooler without a direct URL: the caller polls)."""
        if not self.supports_notify:
            return None
        while True:
            handle = self._shared_session().listen(channel, on_notify)
            if handle is not None:
                return handle

    def liveness_probe(
        self, detected_by: str, now: float | None = None, observer: str | None = None
    ) -> list[StaleWorker]:
        """Reclaim the jobs of active workers whose liveness lock stayed free on consecutive
        probes spanning `liveness_grace` (`LIVENESS_GRACE`) of database time (`now` if
        given); a worker found holding its lock again is forgotten.

        Why not at the first free lock: a free lock means the lock's session is gone, and a
        dropped session is not a dead process. A server restart, a failover, a network
        reset, `idle_session_timeout` or `pg_terminate_backend` ends the session under a
        living worker, which keeps heartbeating; taken for dead at once, it would lose its
        jobs at every probe until they died of spent attempts. Its `AdvisoryLivenessLock`
        takes the lock again within about a second. After a restart every lock is free at
        once, so there is no probe at all while the server has been up for less than
        `liveness_restart_quiet` (`LIVENESS_RESTART_QUIET`). One probe runs at a time per
        queue (`PROBE_KEY`); a prober that finds another one at work skips its turn.

        A failover ends every session too, but the new primary's postmaster may have run
        for days (a standby promoted), so its uptime says nothing. What a prober knows is
        its own session: while this store's shared session is down after it dropped, and
        for `liveness_restart_quiet` after it was opened again, this process does not probe
        (nor touch the suspicions: a worker whose session did not drop goes on probing).
        Every worker's session dropped with the old primary, so none probes until each has
        had that long to reconnect and take its lock again.

        The cost: a SIGKILLed worker's jobs come back after about `LIVENESS_GRACE` plus
        one probe interval (~4 s at default settings) instead of ~1 s; still far below the
        lease (90 s), which stays the backstop. A worker that dies during a failover or a
        restart is found a quiet period later.
        """
        session = self._session
        if session is not None and session.unsettled(self.liveness_restart_quiet):
            return []
        self.ensure_schema()
        with self.pool.transaction() as conn:
            start = conn.execute(q.PROBE_START, {"now": now}).fetchone()
            assert start is not None
            if not start["alone"]:
                return []  # another worker is probing right now
            if float(start["uptime"]) < self.liveness_restart_quiet:
                conn.execute(q.FORGET_SUSPECTS)
                return []
            at = float(start["now"])
            free = conn.execute(q.PROBE_LIVENESS, {"now": now}).fetchall()
            dead = [r["id"] for r in free if at - float(r["free_since"]) >= self.liveness_grace]
            return self._reclaim_dead(conn, now, dead, detected_by, observer)

    def _lock_free(self, namesake: Mapping[str, Any]) -> bool | None:
        """Startup reconciliation believes a free lock as the probes do: once it has been
        found free for `liveness_grace` (None before: suspected). A twin started under a
        live worker's name while that worker's lock session was down would otherwise
        take its jobs (the chaos runs' finding 6)."""
        if not namesake["lock_free"]:
            return False
        free_for = namesake["free_for"]
        return True if free_for is not None and free_for >= self.liveness_grace else None

    def _note_locks(
        self, conn: Any, clock: float | None, free: Sequence[str], held: Sequence[str]
    ) -> None:
        if free or held:
            params = {"free": list(free), "held": list(held), "now": clock}
            conn.execute(q.NOTE_NAMESAKE_LOCKS, params)

    def liveness_suspects(self) -> dict[str, float]:
        """Active workers whose liveness lock the probes (of any worker) found free, not
        yet for the whole grace: worker id -> the probe's time (epoch seconds) when one
        first found it free."""
        self.ensure_schema()
        with self.pool.transaction() as conn:
            rows = conn.execute(q.LIVENESS_SUSPECTS).fetchall()
        return {r["id"]: float(r["free_since"]) for r in rows}

    def liveness_free(self, worker_ids: Sequence[str]) -> list[str]:
        """Active workers among `worker_ids` whose advisory lock is free at this instant
        (tried inside a transaction, so released at once). A session that dropped under
        a living worker shows free for the second its watcher needs to take it again:
        callers only report it; `liveness_probe` alone reclaims, after the grace."""
        if not worker_ids:
            return []
        self.ensure_schema()
        params = {"ids": list(worker_ids), "quiet": self.liveness_restart_quiet}
        with self.pool.transaction() as conn:
            free = {r["id"] for r in conn.execute(q.LIVENESS_FREE, params).fetchall()}
        return [w for w in worker_ids if w in free]

    def listen(self, on_wake: Callable[[], None]) -> LivenessHandle | None:
        """Wake the caller whenever jobs are enqueued or replayed in this schema."""
        return self._listen(self.channel, lambda _payload: on_wake())

    def listen_ends(self, on_end: Callable[[str | None], None]) -> LivenessHandle | None:
        """Tell the caller which awaited jobs of this schema ended (payload: the job id)."""
        return self._listen(self.ends_channel, on_end)

    def listen_cancels(
        self, worker_id: str, on_cancel: Callable[[], None]
    ) -> LivenessHandle | None:
        """Call `on_cancel()` when a cancel is requested of a job `worker_id` runs, and when
        such a notification may have been missed (the session was re-opened)."""

        def heard(payload: str | None) -> None:
            if payload is None or payload == worker_id:
                on_cancel()

        return self._listen(self.cancel_channel, heard)


def _ignore(change: LivenessChange) -> None:
    """The default `on_change`: nobody to tell."""
