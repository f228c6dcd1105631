"""Periodic schedules: `@app.periodic(cron=...)` or `@app.periodic(every=...)` on a task.

A schedule is pure arithmetic on the database's clock: which ticks fall in a span of time,
and which of them to enqueue after a pause (`catch_up`). Every worker that knows a
schedule runs the same arithmetic (`heartq.maintenance.scheduler`); the database
decides who enqueues: the schedule's row is locked while its due ticks are enqueued and
its last tick moved on, and each tick's job carries the unique key
`periodic:<name>@<tick>` (unique jobs), so a tick is one job across the fleet whoever
races, and no leader has to stay alive for the schedule to go on.

Cron expressions are parsed and walked by `cronsim` (the library behind a well-known
cron monitoring service), in the schedule's time zone, so a daily 09:00 stays 09:00
across daylight saving changes. `every=` ticks are multiples of the interval since the
Unix epoch, so every worker finds the same ticks without agreeing on a start.
"""

from __future__ import annotations

import dataclasses
import math
import zoneinfo
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any

from heartq import payload
from heartq.errors import ConfigError
from heartq.hooks import EnqueueRun
from heartq.model import TickPlan
from heartq.payload import MAX_DURATION

CATCH_UP = ("latest", "all", "none")
"""What a schedule does with ticks missed (over `ON_TIME` late: no worker ran): `latest`
enqueues the latest one only (the default: one catch-up run), `all` every one (at most
`MAX_CATCH_UP`, the newest), `none` none. Ticks at most `ON_TIME` late are always
enqueued, each: a busy scheduler is not downtime."""
MAX_CATCH_UP = 1000
"""`catch_up="all"` enqueues at most the 1000 newest missed ticks."""
ON_TIME = 5.0
"""A tick enqueued at most 5 s after its time is on time, not missed (the scheduler of
each worker looks at least once a second, so only a fleet down or stuck is later)."""
MIN_EVERY = 1.0
"""`every=` is at least 1 s: each tick is a job with its history, not a busy loop."""
TICK_KEY_PREFIX = "periodic:"


@dataclasses.dataclass(frozen=True)
class Schedule:
    """One periodic schedule of a task. Build it with `App.periodic`, which checks it."""

    name: str
    task: str
    cron: str | None = None
    every: float | None = None
    args: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    tz: str = "UTC"
    catch_up: str = "latest"
    queue: str | None = None
    """The queue of its ticks' jobs (None: the task's). Runtime schedules only
    (`heartq.runtime_schedules`); a code schedule's jobs take their task's queue."""

    def __post_init__(self) -> None:
        payload.check_name("schedule", self.name)
        payload.check_name("task", self.task)
        if self.queue is not None:
            payload.check_name("queue", self.queue)
        if (self.cron is None) == (self.every is None):
            raise ConfigError(
                f"schedule {self.name!r}: give either cron= or every=, not "
                f"{'both' if self.cron is not None else 'neither'}"
            )
        if self.every is not None:
            payload.check_duration("every", self.every)
            if self.every < MIN_EVERY:
                raise ConfigError(
                    f"schedule {self.name!r}: every must be at least {MIN_EVERY:g} s, "
                    f"got {self.every!r}"
                )
        if self.catch_up not in CATCH_UP:
            raise ConfigError(
                f"schedule {self.name!r}: catch_up must be one of {', '.join(CATCH_UP)}, "
                f"got {self.catch_up!r}"
            )
        zone = self.zone  # refuses an unknown time zone
        if self.cron is not None:
            if not isinstance(self.cron, str):
                raise ConfigError(f"schedule {self.name!r}: cron must be a string")
            # cronsim is imported where a cron schedule is read: a process (a worker, a
            # command) whose apps have none does not pay for it at start-up.
            from cronsim import CronSim, CronSimError

            try:
                next(CronSim(self.cron, datetime.now(zone)))
            except (CronSimError, StopIteration) as exc:
                raise ConfigError(
                    f"schedule {self.name!r}: bad cron expression {self.cron!r}: {exc}"
                ) from None

    @property
    def zone(self) -> zoneinfo.ZoneInfo:
        try:
            return zoneinfo.ZoneInfo(self.tz)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError, TypeError):
            raise ConfigError(
                f"schedule {self.name!r}: unknown time zone {self.tz!r} (an IANA name such "
                "as 'Europe/Paris' or 'UTC')"
            ) from None

    @property
    def spec(self) -> str:
        """What the schedule says, as stored and listed (`heartq periodic`)."""
        if self.cron is not None:
            return f"cron {self.cron}" + ("" if self.tz == "UTC" else f" ({self.tz})")
        return f"every {self.every:g}s"

    @property
    def period(self) -> float:
        """Its shortest gap between ticks, roughly: how often a scheduler must look."""
        return float(self.every) if self.every is not None else 60.0

    def ticks_back(self, now: float, after: float | None, limit: int) -> list[float]:
        """Up to `limit` ticks `t` with `after < t <= now`, newest first."""
        found: list[float] = []
        if self.every is not None:
            k = math.floor(now / self.every)
            while len(found) < limit:
                tick = k * self.every
                if after is not None and tick <= after:
                    break
                found.append(tick)
                k -= 1
            return found
        assert self.cron is not None
        from cronsim import CronSim

        start = datetime.fromtimestamp(now, self.zone) + timedelta(seconds=1)
        for moment in CronSim(self.cron, start, reverse=True):
            tick = moment.timestamp()
            if tick > now:
                continue
            if (after is not None and tick <= after) or len(found) >= limit:
                break
            found.append(tick)
        return found

    def next_tick(self, now: float) -> float:
        """The first tick after `now`."""
        if self.every is not None:
            return (math.floor(now / self.every) + 1) * self.every
        assert self.cron is not None
        from cronsim import CronSim

        return next(CronSim(self.cron, datetime.fromtimestamp(now, self.zone))).timestamp()

    def plan(self, last_tick: float | None, now: float) -> TickPlan:
        """What to enqueue at `now` (the database's time) when the fleet's last tick was
        `last_tick` (None: a schedule seen for the first time, which starts with its next
        tick rather than run at once for a tick nobody promised)."""
        if last_tick is None:
            latest = self.ticks_back(now, None, 1)
            return TickPlan([], latest[0] if latest else None, self.next_tick(now))
        if self.catch_up == "all":
            due = self.ticks_back(now, last_tick, MAX_CATCH_UP)
        else:  # the ticks still on time, all of them: a busy scheduler is not downtime
            due = self.ticks_back(now, max(last_tick, now - ON_TIME), MAX_CATCH_UP)
            if not due and self.catch_up == "latest":
                due = self.ticks_back(now - ON_TIME, last_tick, 1)
            elif not due:  # "none": the missed ones are dealt with by skipping them
                skipped = self.ticks_back(now, last_tick, 1)
                return TickPlan([], skipped[0] if skipped else last_tick, self.next_tick(now))
        if not due:
            return TickPlan([], last_tick, self.next_tick(now))
        due.sort()
        return TickPlan(due, due[-1], self.next_tick(now))

    def tick_key(self, tick: float) -> str:
        """The unique key of one tick's job: the schedule and the tick, to the millisecond."""
        return f"{TICK_KEY_PREFIX}{self.name}@{round(tick * 1000)}"


TICK_UNIQUE_FOR = MAX_DURATION
"""A tick's key counts every job that ever had it (as long as the job is kept): a tick
is one job, however late a second worker comes."""


MakeTickJobs = Callable[[Schedule, Sequence[float]], AbstractContextManager[EnqueueRun]]
"""The jobs of a schedule's ticks, each keyed by its tick (`TICK_UNIQUE_FOR`): what the
scheduler enqueues. The app makes them (`App.make_tick_jobs`): a tick's job is its
task's, with the task's queue and policy, inside the app's enqueue hooks as any enqueue:
entered where the jobs are made (their before parts, which may add `meta`), left once
they are stored (their after parts, told the ids through `EnqueueRun.stored`)."""
