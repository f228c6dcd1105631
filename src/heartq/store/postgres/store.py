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
import threading
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any

import psycopg

from heartq.errors import DuplicateJob, JobNotFound, StoreUnavailable
from heartq.store import documents, reclaim, records, redact
from heartq.store.interface import (
    CancelResult,
    ClaimedJob,
    Finish,
    JobStatus,
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
PRUNE_BATCH = 10_000
LISTEN_TIMEOUT = 1.0

Conn = psycopg.Connection[Any]


def _migrations() -> list[tuple[int, str]]:
    folder = resources.files("heartq.store.postgres") / "migrations"
    found = [
        (int(entry.name.split("_", 1)[0]), entry.read_text("utf-8"))
        for entry in folder.iterdir()
        if entry.name.endswith(".sql")
    ]
    return sorted(found)


class AdvisoryLivenessLock:
    """A session advisory lock held on a dedicated connection for the worker's life."""

    def __init__(self, conn: Conn, worker_id: str) -> None:
        self._conn: Conn | None = conn
        row = conn.execute(
            q.LIVENESS_LOCK, {"namespace": LOCK_NAMESPACE, "worker_id": worker_id}
        ).fetchone()
        if not row or not row["locked"]:
            conn.close()
            raise StoreUnavailable(f"liveness lock of worker {worker_id} is already held")

    def release(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                self._conn.close()  # closing the session drops its advisory locks
            self._conn = None


class Listener:
    """LISTENs on the schema's channel; calls `on_wake()` for every notification."""

    def __init__(self, conn: Conn, channel: str, on_wake: Callable[[], None]) -> None:
        self._conn = conn
        self._stop = threading.Event()
        conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))
        self._on_wake = on_wake
        self._thread = threading.Thread(target=self._loop, name="heartq-listen", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                for _ in self._conn.notifies(timeout=LISTEN_TIMEOUT, stop_after=1):
                    self._on_wake()
            except psycopg.Error:
                return  # the poll interval still wakes the worker

    def release(self) -> None:
        self._stop.set()
        self._thread.join(LISTEN_TIMEOUT + 1)
        with contextlib.suppress(psycopg.Error):
            self._conn.close()


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

    # -- lifecycle -----------------------------------------------------------------------
    def migrate(self) -> int:
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
            for version, script in _migrations():
                if version > current:
                    conn.execute(script.encode())
                    conn.execute("INSERT INTO schema_migrations (version) VALUES (%s)", (version,))
                    current = version
        self._migrated = True
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

    def cancel_job(self, job_id: str, now: float | None = None) -> CancelResult:
        self.ensure_schema()
        with self.pool.transaction() as conn:
            row = conn.execute(q.JOB_STATUS, {"job_id": job_id}).fetchone()
            if row is None:
                raise JobNotFound(job_id)
            if row["status"] == JobStatus.QUEUED:
                conn.execute(q.CANCEL_QUEUED, {"job_id": job_id, "now": now})
                return CancelResult.CANCELLED
            if row["status"] == JobStatus.RUNNING:
                conn.execute(q.REQUEST_CANCEL, {"job_id": job_id, "now": now})
                return CancelResult.CANCEL_REQUESTED
            return CancelResult.ALREADY_FINISHED

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
        self, name: str, except_worker_id: str, detected_by: str, now: float | None = None
    ) -> list[Reclaimed]:
        self.ensure_schema()
        params = {"name": name, "except_id": except_worker_id, "now": now}
        with self.pool.transaction() as conn:
            rows = conn.execute(q.SELECT_NAME_JOBS, params).fetchall()
            conn.execute(q.DEACTIVATE_NAMED, params)
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
        return AdvisoryLivenessLock(self.pool.connect(), worker_id)

    def liveness_probe(self, detected_by: str, now: float | None = None) -> list[StaleWorker]:
        self.ensure_schema()
        found = []
        with self.pool.transaction() as conn:
            dead = [
                r["id"]
                for r in conn.execute(q.PROBE_LIVENESS, {"namespace": LOCK_NAMESPACE}).fetchall()
            ]
            for worker_id in dead:
                worker = conn.execute(
                    q.DEACTIVATE_WORKER, {"worker_id": worker_id, "now": now}
                ).fetchone()
                if worker is not None:
                    found.append(self._reclaim_stale(conn, worker, now, detected_by))
        return found

    def listen(self, on_wake: Callable[[], None]) -> LivenessHandle:
        """Wake the caller whenever jobs are enqueued or replayed in this schema."""
        return Listener(self.pool.connect(), self.channel, on_wake)
