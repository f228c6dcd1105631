"""Task declarations: what the tasks a worker runs declare (queue, priority, retries,
backoff), read by the enqueuer, and the re-routing of the waiting jobs a new declaration
changes.

Why a role of its own: a declaration decides where an enqueue by name goes, but it is
written by workers (`declare_tasks`, then `reroute_jobs` in a transaction of its own:
see `Enqueuer.reroute_jobs`) and read by the enqueuer (`App` looks a task up before it
enqueues) and by `get_job`, which shows the policy in force and where each part of it
comes from (`InspectOps` reads through `read_policies`, in its own read).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from heartq import policy
from heartq.model import TaskPolicy
from heartq.store import documents, records
from heartq.store.sql.base import Dialect, wake
from heartq.store.sql.program import run


class DeclarationOps:
    """The task declarations of `SqlStore` (part of `Enqueuer` in `store/interface.py`)."""

    def __init__(self, dialect: Dialect) -> None:
        self.d = dialect
        self.q = dialect.q

    def read_policies(self, conn: Any, names: Sequence[str] | None) -> dict[str, TaskPolicy]:
        """The declared tasks among `names` (all when None), in the caller's transaction."""
        params = {"all": names is None, "names": self.d.array(list(names or []))}
        rows = conn.execute(self.q.TASK_POLICIES, params).fetchall()
        return {row["name"]: records.task_policy(row) for row in rows}

    def task_policies(self, names: Sequence[str] | None = None) -> dict[str, TaskPolicy]:
        self.d.ensure_schema()
        with self.d.read() as conn:
            return self.read_policies(conn, names)

    def declare_tasks(
        self, policies: Sequence[TaskPolicy], worker_id: str, now: float | None = None
    ) -> list[str]:
        if not policies:
            return []
        self.d.ensure_schema()
        docs = [documents.task_doc(p) for p in policies]
        with self.d.write() as conn:
            before = self.read_policies(conn, [p.name for p in policies])
            params = {"tasks": json.dumps(docs), "worker_id": worker_id}
            conn.execute(self.q.DECLARE_TASKS, dict(params, now=self.d.clock(conn, now)))
        return [p.name for p in policies if not policy.same(before.get(p.name), p)]

    def reroute_jobs(
        self, names: Sequence[str], now: float | None = None, job_ids: Sequence[str] | None = None
    ) -> int:
        if not names:
            return 0
        self.d.ensure_schema()
        with self.d.write() as conn:
            params = {
                "names": self.d.array(list(names)),
                "all": job_ids is None,
                "ids": self.d.array(list(job_ids or [])),
                "now": self.d.clock(conn, now),
                **policy.BIT_PARAMS,
            }
            rows = run(conn, self.q.REROUTE_JOBS, params)
            wake(self.d, conn, {r["queue"] for r in rows})
        return len(rows)
