"""The PostgreSQL backend: the same protocol for workers on many machines.

Claims take rows with `FOR UPDATE SKIP LOCKED`, so workers never wait on each other's
claims; claim, heartbeat and finish are each one statement (with their execution audit
in the same statement). Reclaimers lock the rows they reclaim, skip the ones another
reclaimer holds, and fence their update on `(id, execution_id, status)`: each job is
reclaimed exactly once. Liveness locks are session advisory locks on a connection each
worker keeps for its life; enqueues `NOTIFY` idle workers. SQL: `queries.py`; schema:
`migrations/`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any

import psycopg

from heartq import events
from heartq.errors import DuplicateJob, StoreUnavailable
from heartq.store import documents, reclaim, records, redact
from heartq.store.interface import (
    ClaimedJob,
    Finish,
    Lease,
    LivenessHandle,
    NewJob,
    PruneCounts,
    Reclaimed,
    Renewal,
    RenewStatus,
    StaleWorker,
    WorkerInfo,
)
from heartq.store.postgres import queries as q
from heartq.store.postgres.connection import Pool
from heartq.store.reads import SqlReads

LOCK_NAMESPACE = 0x4851
"""First key of heartq's advisory locks (the second is a hash of the worker id)."""
MIGRATION_LOCK = 0
PROBE_LOCK = 1
"""Second key of the lock a liveness probe holds for its transaction: one probe at a time
per database, so two probers never take each other's try-locks for a worker's own."""
PRUNE_BATCH = 10_000
LISTEN_TIMEOUT = 1.0

LIVENESS_GRACE = 3.0
"""Defaults to 3 s: how long a worker's liveness lock must stay free, on consecutive
probes (database time), before the probe takes the worker for dead. A session that
dropped under a living worker is taken again well within it (`LOCK_CHECK_INTERVAL`)."""
LIVENESS_RESTART_QUIET = 3 * LIVENESS_GRACE
"""Defaults to 9 s (3 x `LIVENESS_GRACE`): no liveness probe while the server has been up
for less than this. A restart ends every session, so every lock is free at once until
each living worker has reconnected and taken its own again."""
LOCK_CHECK_INTERVAL = 0.5
"""Defaults to 0.5 s between two checks of the session that holds a worker's liveness lock
(and between two attempts to take the lock again once a new session is open)."""
RECONNECT_DELAY_MIN = 0.1
"""Defaults to 0.1 s before the second attempt to reopen a dropped session (the first
one is immediate); the delay doubles, with jitter, up to `RECONNECT_DELAY_MAX`."""
RECONNECT_DELAY_MAX = 2.0
"""Defaults to 2 s at most between two attempts to reopen a dropped session: below
`LIVENESS_GRACE`, so a worker is back in time once the server answers again."""
RELEASE_TIMEOUT = 2.0
"""Seconds `release()` waits for a session's thread to stop (it closes its session)."""

# Event names (plain strings here; `heartq.events` lists the shared ones).
LIVENESS_LOCK_LOST = "liveness_lock_lost"
LIVENESS_LOCK_RESTORED = "liveness_lock_restored"

# SQL of this module only (to move to queries.py). `PING` checks the lock's session;
# `PROBE_START` opens a liveness probe: the probe's time (T), the server's uptime (real
# clock: a restart frees every lock) and the probe lock, taken for the transaction.
PING = "SELECT 1"
PROBE_START = f"""
SELECT extract(epoch from {q.T})::float8 AS now,
       extract(epoch from now() - pg_postmaster_start_time())::float8 AS uptime,
       pg_try_advisory_xact_lock(%(namespace)s, %(probe_lock)s) AS alone
"""
MIGRATIONS_TABLE = (
    "SELECT to_regclass(format('%%I.schema_migrations', %(schema)s::text)) IS NOT NULL AS present"
)

Conn = psycopg.Connection[Any]


def _migrations() -> list[tuple[int, str]]:
    folder = resources.files("heartq.store.postgres") / "migrations"
    found = [
        (int(entry.name.split("_", 1)[0]), entry.read_text("utf-8"))
        for entry in folder.iterdir()
        if entry.name.endswith(".sql")
    ]
    return sorted(found)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _close(conn: Conn | None) -> None:
    if conn is not None:
        with contextlib.suppress(Exception):
            conn.close()


class _Backoff:
    """Delays between attempts to reopen a session: none, then doubling with jitter."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._next = 0.0

    def next(self) -> float:
        delay = self._next
        self._next = min(max(2 * self._next, RECONNECT_DELAY_MIN), RECONNECT_DELAY_MAX)
        return delay * random.uniform(0.75, 1.0)


class AdvisoryLivenessLock:
    """A session advisory lock, held on a session of its own for the worker's life.

    The lock lives exactly as long as its session, and a session can end while the
    worker lives on (a server restart or failover, a network reset, `idle_session_timeout`,
    `pg_terminate_backend`). A watcher thread checks the session every
    `LOCK_CHECK_INTERVAL`; once it is gone, it opens a new one (at once, then backing off
    while the server is away) and takes the lock again (`pg_try_advisory_lock`; if a probe
    or the old session still has it, again at the next check). Events:
    `liveness_lock_lost` (warning) and `liveness_lock_restored`. Until the lock is back,
    probes find it free: `PostgresStore.liveness_probe` only believes a lock that stays
    free for `LIVENESS_GRACE`.
    """

    def __init__(self, connect: Callable[[], Conn], worker_id: str) -> None:
        self._connect = connect
        self._worker_id = worker_id
        self._params = {"namespace": LOCK_NAMESPACE, "worker_id": worker_id}
        conn = connect()
        try:
            locked = self._take(conn)
        except BaseException:
            _close(conn)
            raise
        if not locked:
            _close(conn)
            raise StoreUnavailable(f"liveness lock of worker {worker_id} is already held")
        self._conn: Conn | None = conn  # the watcher's from here on
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._watch, name="heartq-liveness-lock", daemon=True
        )
        self._thread.start()

    def _take(self, conn: Conn) -> bool:
        row = conn.execute(q.LIVENESS_LOCK, self._params).fetchone()
        return bool(row and row["locked"])

    def _watch(self) -> None:
        conn, self._conn = self._conn, None
        held = conn is not None
        backoff = _Backoff()
        lost_at = 0.0
        wait = LOCK_CHECK_INTERVAL
        try:
            while not self._stop.wait(wait):
                wait = LOCK_CHECK_INTERVAL
                if held:
                    assert conn is not None
                    try:
                        conn.execute(PING)
                        continue
                    except Exception as exc:  # noqa: BLE001 - whatever it was, the session is gone
                        held, lost_at = False, time.monotonic()
                        _close(conn)
                        conn = None
                        backoff.reset()
                        wait = backoff.next()  # at once
                        events.emit(
                            LIVENESS_LOCK_LOST,
                            logging.WARNING,
                            worker_id=self._worker_id,
                            error=_reason(exc),
                        )
                        continue
                try:
                    if conn is None:
                        conn = self._connect()
                    held = self._take(conn)  # False: a probe or the old session has it
                except Exception:  # noqa: BLE001 - the server may be away: try again later
                    _close(conn)
                    conn = None
                    wait = backoff.next()
                    continue
                if held:
                    events.emit(
                        LIVENESS_LOCK_RESTORED,
                        worker_id=self._worker_id,
                        after=round(time.monotonic() - lost_at, 3),
                    )
        finally:
            _close(conn)  # closing the session drops its advisory locks

    def release(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(RELEASE_TIMEOUT)


class Listener:
    """LISTENs on the schema's channel; calls `on_wake()` for every notification.

    If the LISTEN session drops (a server restart, a network reset, ...), its thread opens
    a new one (at once, then backing off while the server is away), LISTENs again and
    calls `on_wake()` once, for what was enqueued meanwhile."""

    def __init__(
        self, connect: Callable[[], Conn], channel: str, on_wake: Callable[[], None]
    ) -> None:
        self._connect = connect
        self._listen = psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel))
        self._on_wake = on_wake
        self._stop = threading.Event()
        self._conn: Conn | None = self._open()  # the thread's from here on
        self._thread = threading.Thread(target=self._loop, name="heartq-listen", daemon=True)
        self._thread.start()

    def _open(self) -> Conn:
        conn = self._connect()
        try:
            conn.execute(self._listen)
        except BaseException:
            _close(conn)
            raise
        return conn

    def _loop(self) -> None:
        conn, self._conn = self._conn, None
        backoff = _Backoff()
        try:
            while not self._stop.is_set():
                if conn is None:
                    if self._stop.wait(backoff.next()):
                        break
                    try:
                        conn = self._open()
                    except Exception:  # noqa: BLE001 - the server may be away: try again later
                        continue
                    backoff.reset()
                    self._on_wake()  # jobs may have come while nobody listened
                try:
                    for _ in conn.notifies(timeout=LISTEN_TIMEOUT, stop_after=1):
                        self._on_wake()
                except psycopg.Error:
                    _close(conn)
                    conn = None
                    continue
                if conn.closed or conn.broken:
                    _close(conn)
                    conn = None
        finally:
            _close(conn)

    def release(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(LISTEN_TIMEOUT + 1)


class PostgresStore(SqlReads):
    """`Store` on PostgreSQL. Thread-safe: every call takes a pooled connection."""

    q = q
    supports_notify = True

    def __init__(self, url: str) -> None:
        self.pool = Pool(url)
        self.url = redact(url)
        self.schema = self.pool.schema
        self.channel = f"heartq_{self.schema}"
        self._migrated = False
        self.liveness_grace = LIVENESS_GRACE
        self.liveness_restart_quiet = LIVENESS_RESTART_QUIET
        self._lock_free_since: dict[str, float] = {}
        self._suspects_lock = threading.Lock()

    # -- lifecycle -----------------------------------------------------------------------
    def migrate(self) -> int:
        """Bring the schema up to date; returns its version. Reads first: an up-to-date
        schema is left alone, without a lock or a write, so a read-only role can use it."""
        scripts = _migrations()
        latest = scripts[-1][0] if scripts else 0
        current = self._applied_version()
        if current is None or current < latest:
            current = self._apply(scripts)
        self._migrated = True
        return current

    def _applied_version(self) -> int | None:
        """The schema's version, or None if it has no `schema_migrations` table yet."""
        with self.pool.transaction() as conn:
            row = conn.execute(MIGRATIONS_TABLE, {"schema": self.schema}).fetchone()
            if not row or not row["present"]:
                return None
            table = psycopg.sql.Identifier(self.schema, "schema_migrations")
            row = conn.execute(
                psycopg.sql.SQL("SELECT coalesce(max(version), 0) AS v FROM {}").format(table)
            ).fetchone()
        return int(row["v"]) if row else 0

    def _apply(self, scripts: list[tuple[int, str]]) -> int:
        schema = psycopg.sql.Identifier(self.schema)
        with self.pool.transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_NAMESPACE, MIGRATION_LOCK))
            conn.execute(psycopg.sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema))
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations "
                "(version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            row = conn.execute(
                "SELECT coalesce(max(version), 0) AS v FROM schema_migrations"
            ).fetchone()
            current = int(row["v"]) if row else 0
            for version, script in scripts:
                if version > current:
                    conn.execute(script.encode())
                    conn.execute("INSERT INTO schema_migrations (version) VALUES (%s)", (version,))
                    current = version
        return current

    def ensure_schema(self) -> None:
        if not self._migrated:
            self.migrate()

    def close(self) -> None:
        self.pool.close()

    def clock(self) -> float:
        with self.pool.transaction() as conn:
            return self._now(conn, None)

    @staticmethod
    def _now(conn: Conn, now: float | None) -> float:
        row = conn.execute(q.NOW, {"now": now}).fetchone()
        assert row is not None
        return float(row["now"])

    def _write(self) -> contextlib.AbstractContextManager[Any]:
        return self.pool.transaction()

    def _read(self) -> contextlib.AbstractContextManager[Any]:
        return self.pool.transaction()

    # -- client --------------------------------------------------------------------------
    def enqueue(self, jobs: Sequence[NewJob], now: float | None = None) -> list[str]:
        docs = [documents.new_job_doc(job) for job in jobs]
        if not docs:
            return []
        self.ensure_schema()
        try:
            with self.pool.transaction() as conn:
                self._insert(conn, docs, now)
        except psycopg.errors.UniqueViolation as exc:
            raise DuplicateJob(f"a job with one of these ids already exists: {exc}") from None
        return [str(d["id"]) for d in docs]

    def _insert(self, conn: Conn, docs: list[dict[str, Any]], now: float | None) -> None:
        conn.execute(q.INSERT_JOBS, {"jobs": json.dumps(docs), "now": now})
        for queue in sorted({str(d["queue"]) for d in docs}):
            conn.execute(q.NOTIFY, {"channel": self.channel, "queue": queue})

    def _clock_param(self, conn: Any, now: float | None) -> float | None:
        """What this dialect's statements take as `now`."""
        return now

    def replay_dead(
        self, job_ids: Sequence[str] | None = None, now: float | None = None
    ) -> list[str]:
        self.ensure_schema()
        with self.pool.transaction() as conn:
            rows = conn.execute(
                q.REPLAY_DEAD, {"now": now, "all": job_ids is None, "ids": list(job_ids or [])}
            ).fetchall()
            for queue in sorted({r["queue"] for r in rows}):
                conn.execute(q.NOTIFY, {"channel": self.channel, "queue": queue})
        return [r["id"] for r in rows]

    def purge_dead(self, older_than: float | None = None, now: float | None = None) -> int:
        self.ensure_schema()
        with self.pool.transaction() as conn:
            ids = [
                r["id"]
                for r in conn.execute(
                    q.SELECT_PURGEABLE_DEAD, {"now": now, "older_than": older_than}
                )
            ]
            self._delete_jobs(conn, ids)
        return len(ids)

    @staticmethod
    def _delete_jobs(conn: Conn, ids: list[str]) -> None:
        if ids:
            conn.execute(q.DELETE_EXECUTIONS_OF, {"ids": ids})
            conn.execute(q.DELETE_JOBS, {"ids": ids})

    # -- the worker's side ---------------------------------------------------------------
    def claim(
        self,
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        lease: float,
        now: float | None = None,
    ) -> list[ClaimedJob]:
        if limit <= 0:
            return []
        self.ensure_schema()
        params = {
            "worker_id": worker_id,
            "queues": list(queues),
            "limit": limit,
            "lease": lease,
            "now": now,
        }
        with self.pool.transaction() as conn:
            rows = conn.execute(q.CLAIM, params).fetchall()
        return records.claimed_jobs(rows)

    def heartbeat(
        self,
        worker_id: str,
        renewals: Sequence[Renewal],
        lease: float,
        now: float | None = None,
    ) -> dict[Lease, RenewStatus]:
        docs = [documents.renewal_doc(r) for r in renewals]
        params = {"worker_id": worker_id, "renewals": json.dumps(docs), "lease": lease, "now": now}
        with self.pool.transaction() as conn:
            rows = conn.execute(q.HEARTBEAT, params).fetchall()
        return records.renew_answers(renewals, rows)

    def save_checkpoint(
        self, lease: Lease, checkpoint_json: str, now: float | None = None
    ) -> RenewStatus:
        params = {
            "checkpoint": checkpoint_json,
            "job_id": lease.job_id,
            "execution_id": lease.execution_id,
            "now": now,
        }
        with self.pool.transaction() as conn:
            row = conn.execute(q.SAVE_CHECKPOINT, params).fetchone()
        return records.checkpoint_answer(lease, row)

    def finish(self, finishes: Sequence[Finish], now: float | None = None) -> list[Lease]:
        if not finishes:
            return []
        docs = [
            documents.finish_doc(
                f.lease.job_id,
                f.lease.execution_id,
                status=str(f.status),
                outcome=str(f.outcome),
                result=f.result_json,
                error=f.error,
                delay=f.retry_delay,
                dead_reason=f.dead_reason,
                crash=f.crash,
            )
            for f in finishes
        ]
        with self.pool.transaction() as conn:
            landed = self._apply_finishes(conn, docs, now)
        return [f.lease for f in finishes if f.lease not in landed]

    @staticmethod
    def _apply_finishes(conn: Conn, docs: list[dict[str, Any]], now: float | None) -> set[Lease]:
        rows = conn.execute(q.FINISH, {"finishes": json.dumps(docs), "now": now}).fetchall()
        return records.leases(rows)

    def release(self, leases: Sequence[Lease], now: float | None = None) -> list[Lease]:
        if not leases:
            return []
        payload = json.dumps([{"id": x.job_id, "eid": x.execution_id} for x in leases])
        with self.pool.transaction() as conn:
            rows = conn.execute(q.RELEASE, {"leases": payload, "now": now}).fetchall()
        landed = records.leases(rows)
        return [lease for lease in leases if lease not in landed]

    # -- reclaiming ----------------------------------------------------------------------
    def _reclaim_rows(
        self,
        conn: Conn,
        rows: Sequence[dict[str, Any]],
        now: float | None,
        detected_by: str,
        reason: str,
        extra: dict[str, Any] | None = None,
    ) -> list[Reclaimed]:
        if not rows:
            return []
        t = self._now(conn, now)
        docs, decided = reclaim.plan(rows, t, detected_by, reason, extra)
        landed = self._apply_finishes(conn, docs, now)
        return [r for r in decided if Lease(r.job_id, r.execution_id) in landed]

    def reap_expired(
        self, detected_by: str, limit: int = 100, now: float | None = None
    ) -> list[Reclaimed]:
        self.ensure_schema()
        with self.pool.transaction() as conn:
            rows = conn.execute(q.SELECT_EXPIRED, {"now": now, "limit": limit}).fetchall()
            return self._reclaim_rows(conn, rows, now, detected_by, "lease expired")

    def reclaim_worker(
        self, worker_id: str, detected_by: str, reason: str, now: float | None = None
    ) -> list[Reclaimed]:
        with self.pool.transaction() as conn:
            conn.execute(q.DEACTIVATE_WORKER, {"worker_id": worker_id, "now": now})
            rows = conn.execute(q.SELECT_WORKER_JOBS, {"worker_id": worker_id}).fetchall()
            return self._reclaim_rows(conn, rows, now, detected_by, reason)

    def reclaim_by_name(
        self,
        name: str,
        except_worker_id: str,
        detected_by: str,
        now: float | None = None,
        stale_after: float | None = None,
    ) -> list[Reclaimed]:
        self.ensure_schema()
        params = {
            "name": name,
            "except_id": except_worker_id,
            "now": now,
            "stale_after": stale_after,
            "namespace": LOCK_NAMESPACE,
            "probe_lock": PROBE_LOCK,
        }
        with self.pool.transaction() as conn:
            conn.execute(q.WAIT_FOR_PROBES, params)
            namesakes = conn.execute(q.NAMESAKES, params).fetchall()
            gone = reclaim.gone_namesakes(
                namesakes, name, except_worker_id, lambda row: bool(row["lock_free"])
            )
            if not gone:
                return []
            rows = conn.execute(q.SELECT_NAME_JOBS, {"ids": gone}).fetchall()
            conn.execute(q.DEACTIVATE_NAMED, {"ids": gone, "now": now})
            reason = f"worker restarted under the same name {name!r}"
            return self._reclaim_rows(conn, rows, now, detected_by, reason)

    def crash_attempt(
        self, lease: Lease, crash: dict[str, Any], detected_by: str, now: float | None = None
    ) -> Reclaimed | None:
        params = {"job_id": lease.job_id, "execution_id": lease.execution_id}
        with self.pool.transaction() as conn:
            rows = conn.execute(q.SELECT_ONE_RUNNING, params).fetchall()
            reason = str(crash.get("reason", "crashed"))
            extra = {k: v for k, v in crash.items() if k != "reason"}
            done = self._reclaim_rows(conn, rows, now, detected_by, reason, extra)
        return done[0] if done else None

    # -- the worker registry -------------------------------------------------------------
    def register_worker(self, info: WorkerInfo, now: float | None = None) -> None:
        self.ensure_schema()
        params = {
            "id": info.id,
            "name": info.name,
            "hostname": info.hostname,
            "pid": info.pid,
            "queues": json.dumps(list(info.queues)),
            "concurrency": info.concurrency,
            "stale_after": documents.worker_stale_after(info),
            "now": now,
        }
        with self.pool.transaction() as conn:
            conn.execute(q.REGISTER_WORKER, params)

    def stop_worker(self, worker_id: str, now: float | None = None) -> None:
        with self.pool.transaction() as conn:
            conn.execute(q.STOP_WORKER, {"worker_id": worker_id, "now": now})

    def mark_stale_workers(
        self, stale_after: float, detected_by: str, now: float | None = None
    ) -> list[StaleWorker]:
        self.ensure_schema()
        with self.pool.transaction() as conn:
            stale = conn.execute(
                q.DEACTIVATE_STALE, {"now": now, "stale_after": stale_after}
            ).fetchall()
            return [self._reclaim_stale(conn, row, now, detected_by) for row in stale]

    def _reclaim_stale(
        self, conn: Conn, worker: dict[str, Any], now: float | None, detected_by: str
    ) -> StaleWorker:
        rows = conn.execute(q.SELECT_WORKER_JOBS, {"worker_id": worker["id"]}).fetchall()
        reason = records.stale_reason(detected_by, float(worker["heartbeat_age"]))
        reclaimed = self._reclaim_rows(conn, rows, now, detected_by, reason)
        return records.stale_worker(worker, reclaimed)

    def prune(
        self, worker_retention: float, job_retention: float, now: float | None = None
    ) -> PruneCounts:
        self.ensure_schema()
        with self.pool.transaction() as conn:
            workers = conn.execute(
                q.PRUNE_WORKERS, {"now": now, "retention": worker_retention}
            ).rowcount
            ids = [
                r["id"]
                for r in conn.execute(
                    q.SELECT_PRUNABLE_JOBS,
                    {"now": now, "retention": job_retention, "limit": PRUNE_BATCH},
                )
            ]
            self._delete_jobs(conn, ids)
        return PruneCounts(workers=workers, jobs=len(ids))

    # -- liveness locks and wake-ups -----------------------------------------------------
    def liveness_hold(self, worker_id: str) -> LivenessHandle:
        return AdvisoryLivenessLock(self.pool.connect, worker_id)

    def liveness_probe(self, detected_by: str, now: float | None = None) -> list[StaleWorker]:
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
        database (`PROBE_LOCK`); a prober that finds another one at work skips its turn.

        The cost: a SIGKILLed worker's jobs come back after about `LIVENESS_GRACE` plus
        one probe interval (~4 s at default settings) instead of ~1 s; still far below the
        lease (90 s), which stays the backstop. The grace is tracked per store instance
        (the prober's memory), so a single probe of a fresh instance never reclaims.
        """
        self.ensure_schema()
        found = []
        with self.pool.transaction() as conn:
            start = conn.execute(
                PROBE_START, {"now": now, "namespace": LOCK_NAMESPACE, "probe_lock": PROBE_LOCK}
            ).fetchone()
            assert start is not None
            if not start["alone"]:
                return []  # another worker is probing right now
            t = float(start["now"])
            if float(start["uptime"]) < self.liveness_restart_quiet:
                with self._suspects_lock:
                    self._lock_free_since = {}
                return []
            free = [
                r["id"]
                for r in conn.execute(q.PROBE_LIVENESS, {"namespace": LOCK_NAMESPACE}).fetchall()
            ]
            with self._suspects_lock:
                since = {w: self._lock_free_since.get(w, t) for w in free}
                self._lock_free_since = since
            dead = [w for w in free if t - since[w] >= self.liveness_grace]
            for worker_id in dead:
                worker = conn.execute(
                    q.DEACTIVATE_WORKER, {"worker_id": worker_id, "now": now}
                ).fetchone()
                if worker is not None:
                    found.append(self._reclaim_stale(conn, worker, now, detected_by))
        with self._suspects_lock:
            for worker_id in dead:  # inactive now: no longer probed
                self._lock_free_since.pop(worker_id, None)
        return found

    def liveness_suspects(self) -> dict[str, float]:
        """Workers whose liveness lock this instance found free, not yet for the whole
        grace: worker id -> the probe's time (epoch seconds) when it first found it free."""
        with self._suspects_lock:
            return dict(self._lock_free_since)

    def listen(self, on_wake: Callable[[], None]) -> LivenessHandle:
        """Wake the caller whenever jobs are enqueued or replayed in this schema."""
        return Listener(self.pool.connect, self.channel, on_wake)
