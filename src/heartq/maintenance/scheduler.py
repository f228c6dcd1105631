"""The scheduler: the maintenance service that enqueues the due ticks of a worker's
periodic schedules (`@app.periodic`), at least once a second (four times per `every` for
shorter ones).

Every worker that knows a schedule runs it; the database decides who enqueues each tick
(`Store.tick_schedule`: the schedule's row locked, each tick's job keyed by its tick), so
no leader has to stay alive. What a schedule is and which of its ticks are due is
`heartq.periodic`; how a tick's job is made (its task's queue, policy and arguments) is
the app's (`App.make_tick_jobs`), passed in as a `MakeTickJobs`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from heartq.periodic import MakeTickJobs, Schedule
from heartq.store.interface import Enqueuer


def _due(row: Mapping[str, Any], now: float) -> bool:
    return row["next_tick"] is None or float(row["next_tick"]) <= now


class Scheduler:
    """The maintenance service that enqueues the due ticks of a worker's schedules. A pass
    reads the schedules' rows (no write, no lock) and takes the write path only for those
    due, new, or changed, so an idle fleet costs one read per worker per pass."""

    name = "scheduler"

    def __init__(
        self,
        schedules: Sequence[Schedule],
        make_jobs: MakeTickJobs,
        store: Enqueuer,
        worker_id: str,
    ) -> None:
        self.schedules = list(schedules)
        self.make_jobs = make_jobs
        self.store = store
        self.worker_id = worker_id
        shortest = min((s.period for s in self.schedules), default=60.0)
        self.interval = max(0.05, min(1.0, shortest / 4))

    def run_once(self) -> int:
        if not self.schedules:
            return 0
        now = self.store.clock()
        known = {row["name"]: row for row in self.store.list_schedules()}
        enqueued = 0
        for schedule in self.schedules:
            row = known.get(schedule.name)
            if row is not None and row["spec"] == schedule.spec and not _due(row, now):
                continue
            ids = self.store.tick_schedule(
                schedule.name,
                schedule.task,
                schedule.spec,
                schedule.plan,
                functools.partial(self.make_jobs, schedule),
                by=self.worker_id,
            )
            enqueued += len(ids)
        return enqueued
