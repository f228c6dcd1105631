"""The SQLite backend: the embedded default, for any number of processes on one machine.

Every write is one `BEGIN IMMEDIATE` transaction, so claims, renewals, finishes and
reclaims from many processes serialize on SQLite's write lock and each sees the others'
committed work: a job is claimed once, reclaimed once, finished once. The SQL is in
`queries.py`; the schema in `migrations/`.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sqlite3
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from heartq.errors import DuplicateJob
from heartq.store import documents, reclaim, records
from heartq.store.interface import (
    ClaimedJob,
    Finish,
    Lease,
    LivenessHandle,
    NewJob,
    Outcome,
    PruneCounts,
    Reclaimed,
    Renewal,
    RenewStatus,
    StaleWorker,
    WorkerInfo,
)
from heartq.store.reads import SqlReads
from heartq.store.sqlite import liveness
from heartq.store.sqlite import queries as q
from heartq.store.sqlite.connection import (
    DEFAULT_BUSY_TIMEOUT,
    ConnectionPool,
    options_from_url,
    path_from_url,
)

PRUNE_BATCH = 10_000
"""Finished jobs deleted per prune pass, so one pass never holds the write lock for long."""


def _migrations() -> list[tuple[int, str]]:
    folder = resources.files("heartq.store.sqlite") / "migrations"
    found = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            found.append((int(entry.name.split("_", 1)[0]), entry.read_text("utf-8")))
    return sorted(found)


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


class SQLiteStore(SqlReads):
    """`Store` on a SQLite file. Thread-safe: each thread uses its own connection."""

    q = q
    supports_notify = False
    liveness_grace = 0.0  # a free flock is a dead process: the kernel dropped it

    def __init__(self, url: str, *, busy_timeout: float | None = None) -> None:
        self.url = url
        self.path: Path = path_from_url(url)
        options = options_from_url(url)
        timeout = busy_timeout if busy_timeout is not None else options.get("busy_timeout")
        self.pool = ConnectionPool(self.path, DEFAULT_BUSY_TIMEOUT if timeout is None else timeout)
        self._migrated = False

    # -- lifecycle -----------------------------------------------------------------------
    def migrate(self) -> int:
        with self.pool.write() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS heartq_schema_migrations "
                "(version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"
            )
            current = conn.execute(
                "SELECT coalesce(max(version), 0) FROM heartq_schema_migrations"
            ).fetchone()[0]
            for version, script in _migrations():
                if version <= current:
                    continue
                for statement in _statements(script):
                    conn.execute(statement)
                conn.execute(
                    f"INSERT INTO heartq_schema_migrations VALUES (?, ({q.NOW[7:]}))", (version,)
                )
                current = version
        self._migrated = True
        return int(current)

    def ensure_schema(self) -> None:
        if not self._migrated:
            self.migrate()

    def close(self) -> None:
        self.pool.close()

    def clock(self) -> float:
        with self.pool.read() as conn:
            return float(conn.execute(q.NOW).fetchone()[0])

    @staticmethod
    def _now(conn: sqlite3.Connection, now: float | None) -> float:
        return float(now) if now is not None else float(conn.execute(q.NOW).fetchone()[0])

    def _write(self) -> contextlib.AbstractContextManager[Any]:
        return self.pool.write()

    def _read(self) -> contextlib.AbstractContextManager[Any]:
        return self.pool.read()

    # -- client --------------------------------------------------------------------------
    def enqueue(self, jobs: Sequence[NewJob], now: float | None = None) -> list[str]:
        rows = [documents.new_job_doc(job) for job in jobs]
        if not rows:
            return []
        self.ensure_schema()
        try:
            with self.pool.write() as conn:
                t = self._now(conn, now)
                conn.executemany(q.INSERT_JOB, [dict(row, now=t) for row in rows])
        except sqlite3.IntegrityError as exc:
            if "UNIQUE" not in str(exc):
                raise
            raise DuplicateJob(f"a job with one of these ids already exists: {exc}") from None
        return [str(row["id"]) for row in rows]

    def _clock_param(self, conn: Any, now: float | None) -> float | None:
        """What this dialect's statements take as `now`."""
        return self._now(conn, now)

    def replay_dead(
        self, job_ids: Sequence[str] | None = None, now: float | None = None
    ) -> list[str]:
        self.ensure_schema()
        with self.pool.write() as conn:
            t = self._now(conn, now)
            rows = conn.execute(
                q.REPLAY_DEAD,
                {"now": t, "all": job_ids is None, "ids": json.dumps(list(job_ids or []))},
            ).fetchall()
        return [r["id"] for r in rows]

    def purge_dead(self, older_than: float | None = None, now: float | None = None) -> int:
        self.ensure_schema()
        with self.pool.write() as conn:
            t = self._now(conn, now)
            ids = [
                r["id"]
                for r in conn.execute(q.SELECT_PURGEABLE_DEAD, {"now": t, "older_than": older_than})
            ]
            self._delete_jobs(conn, ids)
        return len(ids)

    @staticmethod
    def _delete_jobs(conn: sqlite3.Connection, ids: list[str]) -> None:
        if ids:
            payload = json.dumps(ids)
            conn.execute(q.DELETE_EXECUTIONS_OF, {"ids": payload})
            conn.execute(q.DELETE_JOBS, {"ids": payload})

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
        with self.pool.write() as conn:
            t = self._now(conn, now)
            rows = conn.execute(
                q.CLAIM,
                {
                    "worker_id": worker_id,
                    "queues": json.dumps(list(queues)),
                    "limit": limit,
                    "lease": lease,
                    "now": t,
                },
            ).fetchall()
            if not rows:
                return []
            conn.execute(
                q.INSERT_EXECUTIONS,
                {
                    "worker_id": worker_id,
                    "now": t,
                    "leases": json.dumps([[r["id"], r["execution_id"]] for r in rows]),
                },
            )
        return records.claimed_jobs(rows)

    def heartbeat(
        self,
        worker_id: str,
        renewals: Sequence[Renewal],
        lease: float,
        now: float | None = None,
    ) -> dict[Lease, RenewStatus]:
        payload = json.dumps([documents.renewal_doc(r) for r in renewals])
        with self.pool.write() as conn:
            t = self._now(conn, now)
            conn.execute(q.TOUCH_WORKER, {"worker_id": worker_id, "now": t})
            rows = conn.execute(q.RENEW, {"renewals": payload, "lease": lease, "now": t}).fetchall()
        return records.renew_answers(renewals, rows)

    def save_checkpoint(
        self, lease: Lease, checkpoint_json: str, now: float | None = None
    ) -> RenewStatus:
        with self.pool.write() as conn:
            t = self._now(conn, now)
            row = conn.execute(
                q.SAVE_CHECKPOINT,
                {
                    "checkpoint": checkpoint_json,
                    "job_id": lease.job_id,
                    "execution_id": lease.execution_id,
                    "now": t,
                },
            ).fetchone()
        return records.checkpoint_answer(lease, row)

    def finish(self, finishes: Sequence[Finish], now: float | None = None) -> list[Lease]:
        if not finishes:
            return []
        docs = {
            f.lease: documents.finish_doc(
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
        }
        with self.pool.write() as conn:
            t = self._now(conn, now)
            landed = self._apply_finishes(conn, t, list(docs.values()))
        return [lease for lease in docs if lease not in landed]

    @staticmethod
    def _apply_finishes(
        conn: sqlite3.Connection, t: float, docs: list[dict[str, Any]]
    ) -> set[Lease]:
        """The fenced write shared by finish and every reclaimer: jobs first (only those
        still running under that execution change), then their executions."""
        rows = conn.execute(q.FINISH_JOBS, {"finishes": json.dumps(docs), "now": t}).fetchall()
        landed = records.leases(rows)
        if landed:
            kept = [d for d in docs if Lease(d["id"], d["eid"]) in landed]
            conn.execute(q.CLOSE_EXECUTIONS, {"finishes": json.dumps(kept), "now": t})
        return landed

    def release(self, leases: Sequence[Lease], now: float | None = None) -> list[Lease]:
        if not leases:
            return []
        with self.pool.write() as conn:
            t = self._now(conn, now)
            rows = conn.execute(
                q.RELEASE_JOBS,
                {"leases": json.dumps([[x.job_id, x.execution_id] for x in leases]), "now": t},
            ).fetchall()
            landed = records.leases(rows)
            if landed:
                docs = [
                    {"id": x.job_id, "eid": x.execution_id, "outcome": Outcome.RELEASED.value}
                    for x in landed
                ]
                conn.execute(q.CLOSE_EXECUTIONS, {"finishes": json.dumps(docs), "now": t})
        return [lease for lease in leases if lease not in landed]

    # -- reclaiming ----------------------------------------------------------------------
    def _reclaim_rows(
        self,
        conn: sqlite3.Connection,
        t: float,
        rows: Sequence[sqlite3.Row],
        detected_by: str,
        reason: str,
        extra: dict[str, Any] | None = None,
    ) -> list[Reclaimed]:
        """Close each row's execution as crashed and requeue or bury its job, inside the
        caller's write transaction: exactly once."""
        if not rows:
            return []
        docs, decided = reclaim.plan(rows, t, detected_by, reason, extra)
        landed = self._apply_finishes(conn, t, docs)
        return [r for r in decided if Lease(r.job_id, r.execution_id) in landed]

    def reap_expired(
        self, detected_by: str, limit: int = 100, now: float | None = None
    ) -> list[Reclaimed]:
        self.ensure_schema()
        with self.pool.write() as conn:
            t = self._now(conn, now)
            rows = conn.execute(q.SELECT_EXPIRED, {"now": t, "limit": limit}).fetchall()
            return self._reclaim_rows(conn, t, rows, detected_by, "lease expired")

    def reclaim_worker(
        self, worker_id: str, detected_by: str, reason: str, now: float | None = None
    ) -> list[Reclaimed]:
        with self.pool.write() as conn:
            t = self._now(conn, now)
            conn.execute(q.DEACTIVATE_WORKER, {"worker_id": worker_id, "now": t})
            rows = conn.execute(q.SELECT_WORKER_JOBS, {"worker_id": worker_id}).fetchall()
            return self._reclaim_rows(conn, t, rows, detected_by, reason)

    def reclaim_by_name(
        self,
        name: str,
        except_worker_id: str,
        detected_by: str,
        now: float | None = None,
        stale_after: float | None = None,
    ) -> list[Reclaimed]:
        self.ensure_schema()
        with self.pool.write() as conn:
            t = self._now(conn, now)
            params = {
                "name": name,
                "except_id": except_worker_id,
                "now": t,
                "stale_after": stale_after,
            }
            namesakes = conn.execute(q.NAMESAKES, params).fetchall()
            dead: list[str] = []  # lock free: their lock files can go once reclaimed

            def lock_free(row: sqlite3.Row) -> bool:
                found = liveness.is_dead(self.path, row["id"])
                if found:
                    dead.append(row["id"])
                return found is not False  # no lock file: nothing says it is alive

            gone = reclaim.gone_namesakes(namesakes, name, except_worker_id, lock_free)
            if not gone:
                return []
            ids = json.dumps(gone)
            rows = conn.execute(q.SELECT_NAME_JOBS, {"ids": ids}).fetchall()
            conn.execute(q.DEACTIVATE_NAMED, {"ids": ids, "now": t})
            reclaimed = self._reclaim_rows(
                conn, t, rows, detected_by, f"worker restarted under the same name {name!r}"
            )
        for worker_id in dead:
            liveness.forget(self.path, worker_id)
        return reclaimed

    def crash_attempt(
        self, lease: Lease, crash: dict[str, Any], detected_by: str, now: float | None = None
    ) -> Reclaimed | None:
        with self.pool.write() as conn:
            t = self._now(conn, now)
            rows = conn.execute(
                q.SELECT_ONE_RUNNING, {"job_id": lease.job_id, "execution_id": lease.execution_id}
            ).fetchall()
            reason = str(crash.get("reason", "crashed"))
            extra = {k: v for k, v in crash.items() if k != "reason"}
            done = self._reclaim_rows(conn, t, rows, detected_by, reason, extra)
        return done[0] if done else None

    # -- the worker registry -------------------------------------------------------------
    def register_worker(self, info: WorkerInfo, now: float | None = None) -> None:
        self.ensure_schema()
        with self.pool.write() as conn:
            t = self._now(conn, now)
            conn.execute(
                q.REGISTER_WORKER,
                {
                    "id": info.id,
                    "name": info.name,
                    "hostname": info.hostname,
                    "pid": info.pid,
                    "queues": json.dumps(list(info.queues)),
                    "concurrency": info.concurrency,
                    "stale_after": documents.worker_stale_after(info),
                    "now": t,
                },
            )

    def stop_worker(self, worker_id: str, now: float | None = None) -> None:
        with self.pool.write() as conn:
            conn.execute(q.STOP_WORKER, {"worker_id": worker_id, "now": self._now(conn, now)})

    def mark_stale_workers(
        self, stale_after: float, detected_by: str, now: float | None = None
    ) -> list[StaleWorker]:
        self.ensure_schema()
        with self.pool.write() as conn:
            t = self._now(conn, now)
            stale = conn.execute(q.DEACTIVATE_STALE, {"now": t, "stale_after": stale_after})
            return [self._reclaim_stale(conn, t, row, detected_by) for row in stale.fetchall()]

    def _reclaim_stale(
        self, conn: sqlite3.Connection, t: float, worker: sqlite3.Row, detected_by: str
    ) -> StaleWorker:
        rows = conn.execute(q.SELECT_WORKER_JOBS, {"worker_id": worker["id"]}).fetchall()
        reason = records.stale_reason(detected_by, float(worker["heartbeat_age"]))
        reclaimed = self._reclaim_rows(conn, t, rows, detected_by, reason)
        return records.stale_worker(worker, reclaimed)

    def prune(
        self, worker_retention: float, job_retention: float, now: float | None = None
    ) -> PruneCounts:
        self.ensure_schema()
        with self.pool.write() as conn:
            t = self._now(conn, now)
            workers = conn.execute(
                q.PRUNE_WORKERS, {"now": t, "retention": worker_retention}
            ).rowcount
            ids = [
                r["id"]
                for r in conn.execute(
                    q.SELECT_PRUNABLE_JOBS,
                    {"now": t, "retention": job_retention, "limit": PRUNE_BATCH},
                )
            ]
            self._delete_jobs(conn, ids)
        return PruneCounts(workers=workers, jobs=len(ids))

    # -- liveness locks ------------------------------------------------------------------
    def liveness_hold(self, worker_id: str) -> LivenessHandle:
        return liveness.FileLivenessLock(self.path, worker_id)

    def liveness_probe(self, detected_by: str, now: float | None = None) -> list[StaleWorker]:
        self.ensure_schema()
        with self.pool.read() as conn:
            candidates = [
                r["id"]
                for r in conn.execute(q.ACTIVE_WORKERS_ON_HOST, {"hostname": socket.gethostname()})
            ]
        dead = [wid for wid in candidates if liveness.is_dead(self.path, wid)]
        if not dead:
            return []
        found = []
        with self.pool.write() as conn:
            t = self._now(conn, now)
            for worker_id in dead:
                row = conn.execute(q.DEACTIVATE_WORKER, {"worker_id": worker_id, "now": t})
                worker = row.fetchone()
                if worker is not None:  # another prober may have been first
                    found.append(self._reclaim_stale(conn, t, worker, detected_by))
        for worker_id in dead:
            liveness.forget(self.path, worker_id)
        return found

    def liveness_suspects(self) -> dict[str, float]:
        return {}

    def listen(self, on_wake: Callable[[], None]) -> LivenessHandle | None:
        """No cross-process notifications in SQLite: workers poll, and an enqueue in the
        worker's own process wakes it at once (`App`'s local wake-ups)."""
        return None

    # -- for tests -----------------------------------------------------------------------
    def trace_statements(self, callback: Any) -> None:
        """Call `callback(sql)` for every statement this store runs (tests count them)."""
        self.pool.trace.append(callback)
        self.pool.enable_trace()
