"""Periodic schedules at the store: each tick one job, across racing tickers; catch-up
after a pause; bad schedules refused (driven clock: `now=`)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from heartq.errors import ConfigError
from heartq.model import NewJob
from heartq.periodic import TICK_UNIQUE_FOR, Schedule
from heartq.store import Store

from .support import new_job


def tick(store: Store, schedule: Schedule, now: float, by: str = "w1") -> list[str]:
    def make(ticks: Sequence[float]) -> list[NewJob]:
        return [
            new_job(
                schedule.task,
                {"tick": t},
                unique_key=schedule.tick_key(t),
                unique_for=TICK_UNIQUE_FOR,
                schedule=schedule.name,
            )
            for t in ticks
        ]

    return store.tick_schedule(
        schedule.name, schedule.task, schedule.spec, schedule.plan, make, by=by, now=now
    )


def ticks_of(store: Store) -> list[float]:
    return sorted(j["args"]["tick"] for j in store.list_jobs(limit=1000))


def test_each_tick_is_one_job_whoever_ticks(store: Store, t0: float) -> None:
    every = Schedule(name="beat", task="beat", every=10)
    base = t0 - t0 % 10
    assert tick(store, every, base + 1) == []  # first sight: starts with the next tick
    for worker in ("w1", "w2", "w3"):  # three workers find the tick due
        tick(store, every, base + 10.5, by=worker)
    assert ticks_of(store) == [base + 10]
    job = store.list_jobs(limit=1)[0]
    assert job["schedule"] == "beat" and job["unique_key"] == every.tick_key(base + 10)
    (row,) = store.list_schedules()
    assert (row["last_tick"], row["next_tick"], row["last_job_id"]) == (
        base + 10,
        base + 20,
        job["id"],
    )
    tick(store, every, base + 20.2, by="w2")
    assert ticks_of(store) == [base + 10, base + 20]


def test_a_tick_is_one_job_even_if_the_row_forgot_it(store: Store, t0: float) -> None:
    """The unique key per tick holds where the schedule's row cannot: a schedule renamed
    back and forth, a row deleted by hand."""
    every = Schedule(name="beat", task="beat", every=10)
    base = t0 - t0 % 10
    tick(store, every, base + 1)
    first = tick(store, every, base + 10.5)
    changed = Schedule(name="beat", task="beat", every=5)  # a deploy changes the spec
    tick(store, changed, base + 10.6)  # ...its last tick stays
    back = tick(store, every, base + 10.7)
    assert back == [] and ticks_of(store) == [base + 10]
    assert first


@pytest.mark.parametrize(
    ("catch_up", "expected"),
    [("latest", [60.0]), ("all", [20.0, 30.0, 40.0, 50.0, 60.0]), ("none", [])],
)
def test_ticks_missed_while_no_worker_ran(
    store: Store, t0: float, catch_up: str, expected: list[float]
) -> None:
    every = Schedule(name="beat", task="beat", every=10, catch_up=catch_up)
    base = t0 - t0 % 10
    tick(store, every, base + 1)
    tick(store, every, base + 10.1)
    tick(store, every, base + 67)  # down from 11 to 67: ticks 20..60 missed
    assert ticks_of(store) == [base + 10] + [base + t for t in expected]
    tick(store, every, base + 70.1)  # and on time again
    assert ticks_of(store)[-1] == base + 70


def test_cron_in_a_time_zone() -> None:
    daily = Schedule(name="d", task="d", cron="0 9 * * *", tz="Europe/Paris")
    # 2026-03-28 09:00 CET is 08:00 UTC; the next day (summer time) 09:00 is 07:00 UTC
    first = daily.next_tick(1774684800.0 - 3600)  # 2026-03-28T07:00Z
    assert first == 1774684800.0  # 08:00Z
    assert daily.next_tick(first) == first + 23 * 3600


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"cron": "61 * * * *"}, "bad cron expression '61 \\* \\* \\* \\*'"),
        ({"cron": "every minute"}, "bad cron expression"),
        ({}, "give either cron= or every=, not neither"),
        ({"cron": "* * * * *", "every": 5}, "not both"),
        ({"every": 0.2}, "every must be at least 1 s"),
        ({"every": 5, "catch_up": "some"}, "catch_up must be one of latest, all, none"),
        ({"cron": "* * * * *", "tz": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
    ],
)
def test_bad_schedules_are_refused_in_one_line(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as raised:
        Schedule(name="s", task="s", **options)  # type: ignore[arg-type]
    assert "\n" not in str(raised.value)
