"""The SQL store, written once: every operation of `Store` over a dialect's statements.

A backend is a dialect: its connections, its statements, and a few hooks where it truly
needs something else. Everything else (which statements an operation runs, in which
transaction, with which parameters, and what their rows mean) lives here, so a feature is
written once for SQLite and PostgreSQL.

What a dialect provides (`SQLiteStore` and `PostgresStore` are the two):

- `q`: its `queries.py`, with the same statement names in both dialects (`CLAIM`,
  `HEARTBEAT`, `FINISH`, `RELEASE`, ...), so one can be diffed against the other. A
  statement is a string, or a tuple of strings run in order in the same transaction
  with the same parameters, the last one's rows being the answer (SQLite has no
  data-modifying CTE, so its `HEARTBEAT` is two statements where PostgreSQL has one).
- `_write()` / `_read()`: a write transaction and a read.
- `_now(conn, now)`: the database's time as a number; `_clock(conn, now)`: what its
  statements take as `now` (SQLite: that number, so every statement of the transaction
  agrees; PostgreSQL: `now` as given, `None` meaning the transaction's `now()`).
- `_array(values)`: how a list of ids is bound (SQLite: a JSON text read with
  `json_each`; PostgreSQL: a `text[]`).
- `_is_duplicate(exc)`: whether an error is a duplicate job id.
- hooks with a default: `_wake` (PostgreSQL NOTIFYs idle workers), `_insert_jobs`
  (SQLite binds a lone job by value, cheaper than parsing JSON for one row), `_claim_rows`
  (SQLite writes the claim's executions with a second statement), `_lock_free` and
  `_forget_workers` (how a namesake's liveness lock is judged, and cleaned up).
- `migrate`, `close`, `liveness_hold`, `liveness_probe`, `liveness_suspects`, `listen`.

Backends never log: events are emitted by the worker and the maintenance pass.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib import resources
from types import ModuleType
from typing import Any

from heartq.errors import DuplicateJob, JobNotFound
from heartq.store import documents, reclaim, records, serialize
from heartq.store.interface import (
    CancelResult,
    ClaimedJob,
    Finish,
    JobStatus,
    Lease,
    LivenessChange,
    LivenessHandle,
    NewJob,
    PruneCounts,
    QueueWait,
    Reclaimed,
    Reconciliation,
    Renewal,
    RenewStatus,
    StaleWorker,
    WorkerInfo,
)

PRUNE_BATCH = 10_000
"""Finished jobs deleted per prune pass, so one pass never holds locks for long."""

Statement = str | tuple[str, ...]
Rows = list[Any]


def migration_scripts(package: str) -> list[tuple[int, str]]:
    """A dialect's migrations (`<package>/migrations/NNNN_name.sql`), oldest first."""
    folder = resources.files(package) / "migrations"
    found = [
        (int(entry.name.split("_", 1)[0]), entry.read_text("utf-8"))
        for entry in folder.iterdir()
        if entry.name.endswith(".sql")
    ]
    return sorted(found)


class SqlStore:
    """`Store` over SQL. See the module docstring for what a dialect provides."""

    q: ModuleType
    url: str
    supports_notify: bool = False
    liveness_grace: float = 0.0
    _migrated: bool = False

    # -- dialect hooks -------------------------------------------------------------------
    def migrate(self) -> int:
        raise NotImplementedError

    def _write(self) -> contextlib.AbstractContextManager[Any]:
        raise NotImplementedError

    def _read(self) -> contextlib.AbstractContextManager[Any]:
        raise NotImplementedError

    def _now(self, conn: Any, now: float | None) -> float:
        raise NotImplementedError

    def _clock(self, conn: Any, now: float | None) -> float | None:
        raise NotImplementedError

    def _array(self, values: Sequence[str]) -> Any:
        raise NotImplementedError

    def _is_duplicate(self, exc: Exception) -> bool:
        raise NotImplementedError

    def _wake(self, conn: Any, queues: Iterable[str]) -> None:
        """Tell idle workers that jobs are runnable in `queues` (default: nobody hears)."""

    def _insert_jobs(self, conn: Any, docs: list[dict[str, Any]], clock: float | None) -> None:
        """Insert new jobs (default: the whole batch as one JSON parameter)."""
        self._run(conn, self.q.INSERT_JOBS, {"jobs": json.dumps(docs), "now": clock})

    def _claim_rows(self, conn: Any, params: dict[str, Any]) -> Rows:
        """The claimed rows, their executions written (default: one statement does both)."""
        return self._run(conn, self.q.CLAIM, params)

    def _lock_free(self, namesake: Mapping[str, Any]) -> bool:
        """Whether a namesake's liveness lock is free (default: the `NAMESAKES` row says)."""
        return bool(namesake["lock_free"])

    def _forget_workers(self, worker_ids: Sequence[str]) -> None:
        """Clean up after workers found gone and reclaimed (default: nothing to clean)."""

    def liveness_hold(
        self, worker_id: str, on_change: Callable[[LivenessChange], None] | None = None
    ) -> LivenessHandle:
        raise NotImplementedError

    # -- plumbing ------------------------------------------------------------------------
    def migrations(self) -> list[tuple[int, str]]:
        """This dialect's schema migrations, oldest first: `(version, script)`."""
        return migration_scripts(type(self).__module__.rsplit(".", 1)[0])

    @staticmethod
    def _run(conn: Any, statement: Statement, params: Mapping[str, Any]) -> Rows:
        """Run a statement (or each of a tuple of them, in order); the last one's rows."""
        for text in statement if isinstance(statement, tuple) else (statement,):
            cursor = conn.execute(text, params)
        return cursor.fetchall() if cursor.description else []

    def ensure_schema(self) -> None:
        if not self._migrated:
            self.migrate()

    def _time(self, conn: Any, clock: float | None) -> float:
        """The transaction's time as a number, from what `_clock` gave."""
        return clock if clock is not None else self._now(conn, None)

    def clock(self) -> float:
        with self._read() as conn:
            return self._now(conn, None)

    # -- client --------------------------------------------------------------------------
    def enqueue(self, jobs: Sequence[NewJob], now: float | None = None) -> list[str]:
        docs = [documents.new_job_doc(job) for job in jobs]
        if not docs:
            return []
        self.ensure_schema()
        try:
            with self._write() as conn:
                self._insert_jobs(conn, docs, self._clock(conn, now))
                self._wake(conn, {str(d["queue"]) for d in docs})
        except Exception as exc:
            if self._is_duplicate(exc):
                raise DuplicateJob(f"a job with one of these ids already exists: {exc}") from None
            raise
        return [str(d["id"]) for d in docs]

    def get_job(self, job_id: str) -> dict[str, Any]:
        self.ensure_schema()
        with self._read() as conn:
            row = conn.execute(self.q.GET_JOB, {"job_id": job_id}).fetchone()
            if row is None:
                raise JobNotFound(job_id)
            executions = conn.execute(self.q.GET_EXECUTIONS, {"job_id": job_id}).fetchall()
        return serialize.job_dict(row, executions)

    def list_jobs(
        self, status: str | None = None, queue: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        self.ensure_schema()
        params = {"status": status, "queue": queue, "limit": limit}
        with self._read() as conn:
            rows = conn.execute(self.q.LIST_JOBS, params).fetchall()
        return [serialize.job_dict(row) for row in rows]

    def count_jobs(self) -> list[tuple[str, str, int]]:
        self.ensure_schema()
        with self._read() as conn:
            return [(r["queue"], r["status"], r["n"]) for r in conn.execute(self.q.COUNT_JOBS)]

    def queue_waits(self, now: float | None = None) -> dict[str, QueueWait]:
        self.ensure_schema()
        waits = {}
        with self._read() as conn:
            t = self._now(conn, now)
            for row in conn.execute(self.q.QUEUE_WAITS, {"now": t}).fetchall():
                oldest_id = None
                if row["oldest_run_at"] is not None:
                    params = {"queue": row["queue"], "run_at": row["oldest_run_at"]}
                    found = conn.execute(self.q.OLDEST_RUNNABLE, params).fetchone()
                    oldest_id = found["id"] if found else None
                waits[row["queue"]] = records.queue_wait(row, t, oldest_id)
        return waits

    def cancel_job(self, job_id: str, now: float | None = None) -> CancelResult:
        self.ensure_schema()
        with self._write() as conn:
            row = conn.execute(self.q.JOB_STATUS, {"job_id": job_id}).fetchone()
            if row is None:
                raise JobNotFound(job_id)
            params = {"job_id": job_id, "now": self._clock(conn, now)}
            if row["status"] == JobStatus.QUEUED:
                conn.execute(self.q.CANCEL_QUEUED, params)
                return CancelResult.CANCELLED
            if row["status"] == JobStatus.RUNNING:
                conn.execute(self.q.REQUEST_CANCEL, params)
                return CancelResult.CANCEL_REQUESTED
            return CancelResult.ALREADY_FINISHED

    def replay_dead(
        self, job_ids: Sequence[str] | None = None, now: float | None = None
    ) -> list[str]:
        self.ensure_schema()
        with self._write() as conn:
            params = {
                "now": self._clock(conn, now),
                "all": job_ids is None,
                "ids": self._array(list(job_ids or [])),
            }
            rows = self._run(conn, self.q.REPLAY_DEAD, params)
            self._wake(conn, {r["queue"] for r in rows})
        return [r["id"] for r in rows]

    def purge_dead(self, older_than: float | None = None, now: float | None = None) -> int:
        self.ensure_schema()
        with self._write() as conn:
            params = {"now": self._clock(conn, now), "older_than": older_than}
            ids = [r["id"] for r in conn.execute(self.q.SELECT_PURGEABLE_DEAD, params)]
            self._delete_jobs(conn, ids)
        return len(ids)

    def _delete_jobs(self, conn: Any, ids: list[str]) -> None:
        if ids:
            params = {"ids": self._array(ids)}
            conn.execute(self.q.DELETE_EXECUTIONS_OF, params)
            conn.execute(self.q.DELETE_JOBS, params)

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
        with self._write() as conn:
            params = {
                "worker_id": worker_id,
                "queues": self._array(list(queues)),
                "limit": limit,
                "lease": lease,
                "now": self._clock(conn, now),
            }
            rows = self._claim_rows(conn, params)
        return records.claimed_jobs(rows)

    def heartbeat(
        self,
        worker_id: str,
        renewals: Sequence[Renewal],
        lease: float,
        now: float | None = None,
    ) -> dict[Lease, RenewStatus]:
        payload = json.dumps([documents.renewal_doc(r) for r in renewals])
        with self._write() as conn:
            params = {
                "worker_id": worker_id,
                "renewals": payload,
                "lease": lease,
                "now": self._clock(conn, now),
            }
            rows = self._run(conn, self.q.HEARTBEAT, params)
        return records.renew_answers(renewals, rows)

    def save_checkpoint(
        self, lease: Lease, checkpoint_json: str, now: float | None = None
    ) -> RenewStatus:
        with self._write() as conn:
            params = {
                "checkpoint": checkpoint_json,
                "job_id": lease.job_id,
                "execution_id": lease.execution_id,
                "now": self._clock(conn, now),
            }
            row = conn.execute(self.q.SAVE_CHECKPOINT, params).fetchone()
        return records.checkpoint_answer(lease, row)

    def finish(self, finishes: Sequence[Finish], now: float | None = None) -> list[Lease]:
        if not finishes:
            return []
        # one document per lease (the last one wins): an UPDATE ... FROM a batch that names
        # a row twice would apply either one, perhaps a different one to each table
        docs = {f.lease: documents.attempt_finish_doc(f) for f in finishes}
        with self._write() as conn:
            landed = self._apply_finishes(conn, list(docs.values()), self._clock(conn, now))
        return [f.lease for f in finishes if f.lease not in landed]

    def _apply_finishes(
        self, conn: Any, docs: list[dict[str, Any]], clock: float | None
    ) -> set[Lease]:
        """The fenced write shared by finish and every reclaimer: only jobs still running
        under the execution a document names change, with their executions."""
        rows = self._run(conn, self.q.FINISH, {"finishes": json.dumps(docs), "now": clock})
        return records.leases(rows)

    def release(self, leases: Sequence[Lease], now: float | None = None) -> list[Lease]:
        if not leases:
            return []
        payload = json.dumps([{"id": x.job_id, "eid": x.execution_id} for x in leases])
        with self._write() as conn:
            params = {"leases": payload, "now": self._clock(conn, now)}
            landed = records.leases(self._run(conn, self.q.RELEASE, params))
        return [lease for lease in leases if lease not in landed]

    # -- reclaiming ----------------------------------------------------------------------
    def _reclaim(
        self,
        conn: Any,
        clock: float | None,
        rows: Sequence[Any],
        detected_by: str,
        reason: str,
        extra: dict[str, Any] | None = None,
    ) -> list[Reclaimed]:
        """Close each row's execution as crashed and requeue or bury its job, inside the
        caller's write transaction, fenced: exactly once whoever races."""
        if not rows:
            return []
        t = self._time(conn, clock)
        docs, decided = reclaim.plan(rows, t, detected_by, reason, extra)
        landed = self._apply_finishes(conn, docs, clock)
        requeued = {row["queue"] for row, doc in zip(rows, docs, strict=True) if doc["keep"]}
        self._wake(conn, requeued)  # runnable now: idle workers need not wait for a poll
        return [r for r in decided if Lease(r.job_id, r.execution_id) in landed]

    def reap_expired(
        self, detected_by: str, limit: int = 100, now: float | None = None
    ) -> list[Reclaimed]:
        self.ensure_schema()
        with self._write() as conn:
            clock = self._clock(conn, now)
            rows = conn.execute(self.q.SELECT_EXPIRED, {"now": clock, "limit": limit}).fetchall()
            return self._reclaim(conn, clock, rows, detected_by, "lease expired")

    def reclaim_worker(
        self, worker_id: str, detected_by: str, reason: str, now: float | None = None
    ) -> list[Reclaimed]:
        with self._write() as conn:
            clock = self._clock(conn, now)
            conn.execute(self.q.DEACTIVATE_WORKER, {"worker_id": worker_id, "now": clock})
            rows = conn.execute(self.q.SELECT_WORKER_JOBS, {"worker_id": worker_id}).fetchall()
            return self._reclaim(conn, clock, rows, detected_by, reason)

    def reclaim_by_name(
        self,
        name: str,
        except_worker_id: str,
        detected_by: str,
        now: float | None = None,
        stale_after: float | None = None,
    ) -> Reconciliation:
        self.ensure_schema()
        with self._write() as conn:
            clock = self._clock(conn, now)
            params = {
                "name": name,
                "except_id": except_worker_id,
                "now": clock,
                "stale_after": stale_after,
            }
            gone, alive = reclaim.sort_namesakes(
                self._run(conn, self.q.NAMESAKES, params), self._lock_free
            )
            if not gone:
                return Reconciliation([], alive)
            ids = self._array(gone)
            rows = conn.execute(self.q.SELECT_NAME_JOBS, {"ids": ids}).fetchall()
            conn.execute(self.q.DEACTIVATE_NAMED, {"ids": ids, "now": clock})
            reason = f"worker restarted under the same name {name!r}"
            reclaimed = self._reclaim(conn, clock, rows, detected_by, reason)
        self._forget_workers(gone)
        return Reconciliation(reclaimed, alive)

    def crash_attempt(
        self, lease: Lease, crash: dict[str, Any], detected_by: str, now: float | None = None
    ) -> Reclaimed | None:
        params = {"job_id": lease.job_id, "execution_id": lease.execution_id}
        reason = str(crash.get("reason", "crashed"))
        extra = {k: v for k, v in crash.items() if k != "reason"}
        with self._write() as conn:
            clock = self._clock(conn, now)
            rows = conn.execute(self.q.SELECT_ONE_RUNNING, params).fetchall()
            done = self._reclaim(conn, clock, rows, detected_by, reason, extra)
        return done[0] if done else None

    # -- the worker registry -------------------------------------------------------------
    def register_worker(self, info: WorkerInfo, now: float | None = None) -> None:
        self.ensure_schema()
        with self._write() as conn:
            params = {
                "id": info.id,
                "name": info.name,
                "hostname": info.hostname,
                "pid": info.pid,
                "queues": json.dumps(list(info.queues)),
                "concurrency": info.concurrency,
                "stale_after": documents.worker_stale_after(info),
                "now": self._clock(conn, now),
            }
            conn.execute(self.q.REGISTER_WORKER, params)

    def stop_worker(self, worker_id: str, now: float | None = None) -> None:
        with self._write() as conn:
            params = {"worker_id": worker_id, "now": self._clock(conn, now)}
            conn.execute(self.q.STOP_WORKER, params)

    def mark_stale_workers(
        self, stale_after: float, detected_by: str, now: float | None = None
    ) -> list[StaleWorker]:
        self.ensure_schema()
        with self._write() as conn:
            clock = self._clock(conn, now)
            params = {"now": clock, "stale_after": stale_after}
            stale = conn.execute(self.q.DEACTIVATE_STALE, params).fetchall()
            return [self._reclaim_stale(conn, clock, row, detected_by) for row in stale]

    def _reclaim_dead(
        self, conn: Any, clock: float | None, worker_ids: Sequence[str], detected_by: str
    ) -> list[StaleWorker]:
        """Deactivate each worker found dead and reclaim its jobs; one another prober
        deactivated first is left to it."""
        found = []
        for worker_id in worker_ids:
            params = {"worker_id": worker_id, "now": clock}
            worker = conn.execute(self.q.DEACTIVATE_WORKER, params).fetchone()
            if worker is not None:
                found.append(self._reclaim_stale(conn, clock, worker, detected_by))
        return found

    def _reclaim_stale(
        self, conn: Any, clock: float | None, worker: Any, detected_by: str
    ) -> StaleWorker:
        rows = conn.execute(self.q.SELECT_WORKER_JOBS, {"worker_id": worker["id"]}).fetchall()
        reason = records.stale_reason(detected_by, float(worker["heartbeat_age"]))
        reclaimed = self._reclaim(conn, clock, rows, detected_by, reason)
        return records.stale_worker(worker, reclaimed)

    def list_workers(self, include_all: bool = False) -> list[dict[str, Any]]:
        self.ensure_schema()
        with self._read() as conn:
            rows = conn.execute(self.q.LIST_WORKERS, {"include_all": include_all}).fetchall()
        return [serialize.worker_dict(r) for r in rows]

    def prune(
        self, worker_retention: float, job_retention: float, now: float | None = None
    ) -> PruneCounts:
        self.ensure_schema()
        with self._write() as conn:
            clock = self._clock(conn, now)
            params = {"now": clock, "retention": worker_retention}
            workers = conn.execute(self.q.PRUNE_WORKERS, params).rowcount
            params = {"now": clock, "retention": job_retention, "limit": PRUNE_BATCH}
            ids = [r["id"] for r in conn.execute(self.q.SELECT_PRUNABLE_JOBS, params)]
            self._delete_jobs(conn, ids)
        return PruneCounts(workers=workers, jobs=len(ids))
