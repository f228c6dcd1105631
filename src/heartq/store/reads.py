"""The read side of a SQL backend, written once.

Every SQL backend names its statements and their parameters the same way in its
`queries.py` (GET_JOB, LIST_JOBS, ...), so the operator's reads need no dialect of their
own: a backend mixes this in and provides `q`, `_read()` and `_now()`.
"""

from __future__ import annotations

import contextlib
from types import ModuleType
from typing import Any

from heartq.errors import JobNotFound
from heartq.store import records, serialize
from heartq.store.interface import QueueWait


class SqlReads:
    q: ModuleType

    def ensure_schema(self) -> None:
        raise NotImplementedError

    def _read(self) -> contextlib.AbstractContextManager[Any]:
        raise NotImplementedError

    def _now(self, conn: Any, now: float | None) -> float:
        raise NotImplementedError

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
