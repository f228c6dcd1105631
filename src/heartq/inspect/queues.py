"""Each queue at a glance with what an operator decided of it (`heartq.queue_controls`):
paused or not, each worker's cap, its jobs waiting and running, the workers that serve
it, its fairness keys in use (`heartq.inspect.fairness`). `heartq queues` prints it, the
dashboard's queues page draws it, `heartq stats` and the dashboard's overview show the
paused ones, the metrics export the controls."""

from __future__ import annotations

from typing import Any

from heartq.inspect import fleet
from heartq.inspect.fairness import fair_keys
from heartq.inspect.stats import jobs_by_queue
from heartq.model import JobStatus
from heartq.store import Store


def queue_overview(store: Store) -> list[dict[str, Any]]:
    """Every queue that has jobs, is served by an active worker, was ever controlled or
    has fairness keys in use, by name: `queue`, `paused`, `concurrency` (each worker's
    cap; None: none), `queued`, `running` (claimed ahead included), `workers` (active,
    serving it), `changed_at`, `changed_by` (the last control; None if never
    controlled), `fair` (its fairness keys in use, as `fairness.fair_keys` reads them;
    None if none)."""
    by_queue = jobs_by_queue(store.job_counts())
    controls = store.queue_controls()
    fair = fair_keys(store)
    serving: dict[str, int] = {}
    for worker in fleet.workers(store, include_all=False):
        if worker["gone"]:
            continue
        for queue in worker.get("queues") or []:
            serving[queue] = serving.get(queue, 0) + 1
    rows = []
    for queue in sorted({*by_queue, *controls, *serving, *fair}):
        counts = by_queue.get(queue, {})
        control = controls.get(queue)
        rows.append(
            {
                "queue": queue,
                "paused": bool(control and control.paused),
                "concurrency": None if control is None else control.concurrency,
                "queued": counts.get(JobStatus.QUEUED.value, 0),
                "running": counts.get(JobStatus.RUNNING.value, 0) + counts.get("claimed", 0),
                "workers": serving.get(queue, 0),
                "changed_at": None if control is None else control.changed_at,
                "changed_by": None if control is None else control.changed_by,
                "fair": fair.get(queue),
            }
        )
    return rows
