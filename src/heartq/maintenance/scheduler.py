"""The scheduler: the maintenance service that enqueues the due ticks of a worker's
periodic schedules (`@app.periodic`), at least once a second (four times per `every` for
shorter ones).

Every worker that knows a schedule runs it; the database decides who enqueues each tick
(`Store.tick_schedule`: the schedule's row locked, each tick's job keyed by its tick), so
no leader has to stay alive. What a schedule is and which of its ticks are due is
`heartq.periodic`; how a tick's job is made (its task's queue, policy and arguments,
inside the app's enqueue hooks) is the app's (`App.make_tick_jobs`), passed in as a
`MakeTickJobs`. The hooks run outside any transaction, as for any enqueue: a slow hook
or one that writes to the queue holds no lock (`Scheduler._tick` says how).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from heartq.model import NewJob, TickPlan
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
            enqueued += len(self._tick(schedule, row, now))
        return enqueued

    def _tick(self, schedule: Schedule, row: Mapping[str, Any] | None, now: float) -> list[str]:
        """Enqueue a schedule's due ticks, if another worker did not.

        The enqueue hooks run first, outside any transaction (a hook that is slow, or
        that enqueues, holds no lock: inside, it held the schedule's row and, on SQLite,
        the file's write lock), for the ticks due as this pass read the row at `now`.
        The store's transaction then decides, with the row locked, which ticks are still
        due at that same moment: the same, or fewer when another worker enqueued some
        meanwhile (their hooks' after parts are told no job id). Should it find a tick
        the hooks did not see (the row was moved back by hand meanwhile), it stores
        nothing and the next pass plans again."""
        last = None if row is None or row["last_tick"] is None else float(row["last_tick"])
        planned = schedule.plan(last, now).ticks
        with self.make_jobs(schedule, planned) as run:
            made = dict(zip(planned, run.jobs, strict=True))
            taken: list[float] = []

            def plan(last_tick: float | None, at: float) -> TickPlan:
                return schedule.plan(last_tick, min(at, now))

            def make(ticks: Sequence[float]) -> Sequence[NewJob]:
                if not made.keys() >= set(ticks):
                    raise _Unforeseen
                taken[:] = ticks
                return [made[tick] for tick in ticks]

            try:
                ids = self.store.tick_schedule(
                    schedule.name, schedule.task, schedule.spec, plan, make, by=self.worker_id
                )
            except _Unforeseen:
                ids = []
            stored = dict(zip(taken, ids, strict=True))
            run.stored([stored.get(tick) for tick in planned])
            return ids


class _Unforeseen(Exception):
    """The transaction found a due tick the hooks did not see: it stores nothing."""
