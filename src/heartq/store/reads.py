"""The operator's side of a SQL backend (reads, cancel), written once.

Every SQL backend names its statements and their parameters the same way in its
`queries.py` (GET_JOB, LIST_JOBS, CANCEL_QUEUED, ...), so these need no dialect of their
own: a backend mixes this in and provides `q`, `_read()`, `_write()`, `_now()` (the
database time as a number) and `_clock_param()` (what its statements take as `now`).
"""

from __future__ import annotations

import contextlib
from types import ModuleType
from typing import Any

from heartq.errors import JobNotFound
from heartq.store import records, serialize
from heartq.store.interface import CancelResult, JobStatus, QueueWait


class SqlReads:
    q: ModuleType

    def ensure_schema(self) -> None:
        raise NotImplementedError

    def _read(self) -> contextlib.AbstractContextManager[Any]:
        raise NotImplementedError

    def _write(self) -> contextlib.AbstractContextManager[Any]:
        raise NotImplementedError

    def _now(self, conn: Any, now: float | None) -> float:
        raise NotImplementedError

    def _clock_param(self, conn: Any, now: float | None) -> float | None:
        raise NotImplementedError

    def cancel_job(self, job_id: str, now: float | None = None) -> CancelResult:
        self.ensure_schema()
        with self._write() as conn:
            row = conn.execute(self.q.JOB_STATUS, {"job_id": job_id}).fetchone()
            if row is None:
                raise JobNotFound(job_id)
            params = {"job_id": job_id, "now": self._clock_param(conn, now)}
            if row["status"] == JobStatus.QUEUED:
                conn.execute(self.q.CANCEL_QUEUED, params)
                return CancelResult.CANCELLED
            if row["status"] == JobStatus.RUNNING:
                conn.execute(self.q.REQUEST_CANCEL, params)
                return CancelResult.CANCEL_REQUESTED
            return CancelResult.ALREADY_FINISHED

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

    def list_workers(self, include_all: bool = False) -> list[dict[str, Any]]:
        self.ensure_schema()
        with self._read() as conn:
            rows = conn.execute(self.q.LIST_WORKERS, {"include_all": include_all}).fetchall()
        return [serialize.worker_dict(r) for r in rows]
