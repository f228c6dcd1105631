"""Queues an operator controls while workers run (`heartq.queue_controls`): paused, or
each worker's share of them capped.

Why apart: these are neither a job's nor a worker's rows; an operator writes them and
every worker of a queue reads them once a second (`heartq.worker.controls`), and nothing
else in the store reads them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from heartq.queue_controls import QueueControl, check_concurrency, check_queue_name
from heartq.store.sql.base import Dialect


class ControlOps:
    """The queue controls' operations of `SqlStore` (`Administrator.set_queue_control`,
    `Inspector.queue_controls` in `store/interface.py`)."""

    def __init__(self, dialect: Dialect) -> None:
        self.d = dialect
        self.q = dialect.q

    def set_queue_control(
        self,
        queue: str,
        *,
        paused: bool | None,
        scale: bool,
        concurrency: int | None,
        by: str,
        now: float | None = None,
    ) -> QueueControl:
        queue = check_queue_name(queue)  # an operator's words: one line, nothing written
        concurrency = check_concurrency(concurrency)
        self.d.ensure_schema()
        with self.d.write() as conn:
            params = {
                "queue": queue,
                "paused": paused,
                "scale": scale,
                "concurrency": concurrency,
                "by": by,
                "now": self.d.clock(conn, now),
            }
            row = conn.execute(self.q.SET_QUEUE_CONTROL, params).fetchone()
        return _control(row)

    def queue_controls(self, queues: Sequence[str] | None = None) -> dict[str, QueueControl]:
        self.d.ensure_schema()
        with self.d.read() as conn:
            named = None if queues is None else self.d.array(list(queues))
            rows = conn.execute(self.q.QUEUE_CONTROLS, {"queues": named}).fetchall()
        return {row["queue"]: _control(row) for row in rows}


def _control(row: Mapping[str, Any]) -> QueueControl:
    return QueueControl(
        queue=row["queue"],
        paused=bool(row["paused"]),
        concurrency=row["concurrency"],
        changed_at=row["changed_at"],
        changed_by=row["changed_by"],
    )
