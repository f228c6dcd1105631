"""The scheduler: the maintenance service that enqueues the due ticks of a worker's
periodic schedules (`@app.periodic`), at least once a second (four times per `every` for
shorter ones).

Every worker that knows a schedule runs it; the database decides who enqueues each tick
(`Store.tick_schedule`: the schedule's row locked, each tick's job keyed by its tick), so
no leader has to stay alive. What a schedule is and which of its ticks are due is
`heartq.periodic`; how a tick's job is made (its task's queue, policy and arguments,
inside the app's enqueue hooks) is the app's (`App.make_tick_jobs`), passed in as a
`MakeTickJobs`. The hooks' before parts run inside the transaction that records the tick
(they may add `meta`, as for any enqueue), so a slow hook holds the schedule's row.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from heartq.hooks import EnqueueRun
from heartq.model import NewJob
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
            enqueued += len(self._tick(schedule))
        return enqueued

    def _tick(self, schedule: Schedule) -> list[str]:
        """Enqueue a schedule's due ticks, if another worker did not: the jobs are made
        inside the store's transaction (which decides the ticks), the enqueue hooks'
        before parts with them, their after parts once that transaction ended."""
        with contextlib.ExitStack() as hooked:
            runs: list[EnqueueRun] = []

            def make(ticks: Sequence[float]) -> Sequence[NewJob]:
                runs.append(hooked.enter_context(self.make_jobs(schedule, ticks)))
                return runs[-1].jobs

            ids = self.store.tick_schedule(
                schedule.name, schedule.task, schedule.spec, schedule.plan, make, by=self.worker_id
            )
            if runs:
                runs[-1].stored(ids)
            return ids
