"""The worker registry: a worker's row from its start (`register_worker`) to its clean
stop (`stop_worker`), and the list operators read (`list_workers`).

Why apart: these are the registry's writes that reclaim nothing, and its one read.
Deactivating a worker found silent, gone or restarted is a reclaim (`reclaim.py`); a
worker's row is renewed by its heartbeat, with its leases (`leases.py`); gone workers
are pruned with finished jobs (`admin.py`); liveness locks are each dialect's own (lock
files, advisory locks), in its `liveness.py`.
"""

from __future__ import annotations

import json
from typing import Any

from heartq.model import WorkerInfo
from heartq.store import documents, records
from heartq.store.sql.base import Dialect


class RegistryOps:
    """The registry's operations of `SqlStore` (`Registry` in `store/interface.py`), but
    the liveness locks (the dialect's `Liveness`)."""

    def __init__(self, dialect: Dialect, holds_liveness_lock: bool) -> None:
        self.d = dialect
        self.q = dialect.q
        self.holds_liveness_lock = holds_liveness_lock  # recorded with each worker

    def register_worker(self, info: WorkerInfo, now: float | None = None) -> None:
        self.d.ensure_schema()
        with self.d.write() as conn:
            params = {
                "id": info.id,
                "name": info.name,
                "hostname": info.hostname,
                "pid": info.pid,
                "queues": json.dumps(list(info.queues)),
                "concurrency": info.concurrency,
                "stale_after": documents.worker_stale_after(info),
                "liveness_lock": self.holds_liveness_lock,
                "now": self.d.clock(conn, now),
            }
            conn.execute(self.q.REGISTER_WORKER, params)

    def stop_worker(self, worker_id: str, now: float | None = None) -> None:
        with self.d.write() as conn:
            params = {"worker_id": worker_id, "now": self.d.clock(conn, now)}
            conn.execute(self.q.STOP_WORKER, params)

    def list_workers(self, include_all: bool = False) -> list[dict[str, Any]]:
        self.d.ensure_schema()
        with self.d.read() as conn:
            rows = conn.execute(self.q.LIST_WORKERS, {"include_all": include_all}).fetchall()
        return [records.worker_dict(r) for r in rows]
