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

Runtime schedules (`heartq.runtime_schedules`) are read from the same rows each pass, so
one added, changed, paused or removed is obeyed by the next pass of every worker (at most
a second later) without a restart; a code schedule of the same name wins.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from heartq import events
from heartq.errors import BadArguments, ConfigError, PayloadError
from heartq.event_stream import EventStream
from heartq.model import NewJob, TickPlan
from heartq.periodic import MakeTickJobs, Schedule
from heartq.runtime_schedules import from_row
from heartq.store.interface import Enqueuer


def _due(row: Mapping[str, Any], now: float) -> bool:
    return row["next_tick"] is None or float(row["next_tick"]) <= now


class Scheduler:
    """The maintenance service that enqueues the due ticks of a worker's schedules: its
    app's code schedules and the fleet's runtime ones. A pass reads the schedules' rows
    (no write, no lock) and takes the write path only for those due, new, or changed, so
    an idle fleet costs one read per worker per pass."""

    name = "scheduler"

    def __init__(
        self,
        schedules: Sequence[Schedule],
        make_jobs: MakeTickJobs,
        store: Enqueuer,
        worker_id: str,
        stream: EventStream | None = None,
    ) -> None:
        self.schedules = list(schedules)
        self.make_jobs = make_jobs
        self.store = store
        self.worker_id = worker_id
        self.stream = stream
        self._runtime: dict[str, tuple[str, Schedule]] = {}  # parsed once per definition
        self._told: set[tuple[str, str]] = set()
        self.interval = _interval(self.schedules)

    def run_once(self) -> int:
        now = self.store.clock()
        known = {row["name"]: row for row in self.store.list_schedules(last_jobs=False)}
        runtime = self._runtime_schedules(known)
        self.interval = _interval([*self.schedules, *runtime])
        enqueued = 0
        for schedule in self.schedules:
            row = known.get(schedule.name)
            if row is not None and row["spec"] == schedule.spec and not _due(row, now):
                continue
            enqueued += len(self._tick(schedule, row, now))
        for schedule in runtime:
            row = known[schedule.name]
            if row["spec"] == schedule.spec and not _due(row, now):
                continue
            try:
                enqueued += len(self._tick(schedule, row, now, runtime=True))
            except (BadArguments, ConfigError, PayloadError) as exc:  # its task refuses its args
                self._tell(schedule.name, f"its jobs could not be made: {exc}")
        return enqueued

    def _runtime_schedules(self, known: Mapping[str, Mapping[str, Any]]) -> list[Schedule]:
        """The runtime schedules among the rows, those this worker's code does not
        declare (code wins: its next tick drops the runtime definition)."""
        code = {s.name for s in self.schedules}
        found = []
        for name, row in known.items():
            if row.get("definition") is None:
                continue
            if name in code:
                self._tell(name, "a code schedule of this name runs instead")
                continue
            stamp = json.dumps([row["task"], row["definition"]], sort_keys=True)
            cached = self._runtime.get(name)
            if cached is None or cached[0] != stamp:
                try:
                    cached = (stamp, from_row(row))
                except ConfigError as exc:
                    self._tell(name, str(exc))
                    continue
                self._runtime[name] = cached
            found.append(cached[1])
        return found

    def _tell(self, name: str, reason: str) -> None:
        """A runtime schedule this worker does not run, told once per reason."""
        if (name, reason) in self._told or self.stream is None:
            return
        self._told.add((name, reason))
        self.stream.emit(
            events.SCHEDULE_SKIPPED,
            logging.WARNING,
            worker_id=self.worker_id,
            schedule=name,
            reason=reason,
        )

    def _tick(
        self,
        schedule: Schedule,
        row: Mapping[str, Any] | None,
        now: float,
        *,
        runtime: bool = False,
    ) -> list[str]:
        """Enqueue a schedule's due ticks, if another worker did not.

        The enqueue hooks run first, outside any transaction (a hook that is slow, or
        that enqueues, holds no lock: inside, it held the schedule's row and, on SQLite,
        the file's write lock), for the ticks due as this pass read the row at `now`.
        The store's transaction then decides, with the row locked, which ticks are still
        due at that same moment: the same, or fewer when another worker enqueued some
        meanwhile (their hooks' after parts are told no job id). Should it find a tick
        the hooks did not see (the row was moved back by hand meanwhile), it stores
        nothing and the next pass plans again."""
        paused = row is not None and bool(row.get("paused"))
        if paused:
            return self._pass(schedule, now, runtime=runtime)
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
                    schedule.name,
                    schedule.task,
                    schedule.spec,
                    plan,
                    make,
                    by=self.worker_id,
                    runtime=runtime,
                )
            except _Unforeseen:
                ids = []
            stored = dict(zip(taken, ids, strict=True))
            run.stored([stored.get(tick) for tick in planned])
            return ids

    def _pass(self, schedule: Schedule, now: float, *, runtime: bool) -> list[str]:
        """A paused schedule's ticks pass without a job: its last tick moves on to the
        latest, so a resume starts at the next tick instead of catching the pause up."""

        def plan(last_tick: float | None, at: float) -> TickPlan:
            at = min(at, now)
            latest = schedule.ticks_back(at, last_tick, 1)
            return TickPlan([], latest[0] if latest else last_tick, schedule.next_tick(at))

        self.store.tick_schedule(
            schedule.name,
            schedule.task,
            schedule.spec,
            plan,
            lambda ticks: [],
            by=self.worker_id,
            runtime=runtime,
            paused=True,
        )
        return []


def _interval(schedules: Sequence[Schedule]) -> float:
    """How often to look: a quarter of the shortest period, between 0.05 and 1 s."""
    shortest = min((s.period for s in schedules), default=60.0)
    return max(0.05, min(1.0, shortest / 4))


class _Unforeseen(Exception):
    """The transaction found a due tick the hooks did not see: it stores nothing."""
