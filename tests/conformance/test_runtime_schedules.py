"""Runtime schedules, stored (`Store.save_schedule`, `remove_schedule`, `pause_schedule`,
`heartq.runtime_schedules`): one namespace with code schedules where code wins, a change
replans from the fleet's last tick, a removed or paused one ticks nothing, bad input is
refused before anything is written. (Workers running them:
tests/integration/test_runtime_schedules.py.)"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from heartq import runtime_schedules
from heartq.errors import ConfigError
from heartq.model import NewJob
from heartq.periodic import TICK_UNIQUE_FOR, Schedule
from heartq.store import Store
from tests.conformance.support import new_job
from tests.conformance.test_periodic import tick

T0 = 1_700_000_000.0


def _row(store: Store, name: str) -> dict[str, object]:
    (found,) = [r for r in store.list_schedules() if r["name"] == name]
    return found


def _runtime_tick(store: Store, s: Schedule, now: float, *, paused: bool = False) -> list[str]:
    def make(ticks: Sequence[float]) -> list[NewJob]:
        return [
            new_job(s.task, {}, unique_key=s.tick_key(t), unique_for=TICK_UNIQUE_FOR)
            for t in ticks
        ]

    return store.tick_schedule(
        s.name, s.task, s.spec, s.plan, make, by="w1", now=now, runtime=True, paused=paused
    )


def test_an_added_schedule_is_listed_with_its_definition_and_ticks(store: Store) -> None:
    s = runtime_schedules.build("nightly", "report", every=10, args={"n": 1}, queue="q2")
    assert runtime_schedules.add(store, s, by="ann") is True
    row = _row(store, "nightly")
    assert row["definition"] == runtime_schedules.definition(s)
    assert (row["task"], row["spec"], row["paused"], row["changed_by"]) == (
        "report", "every 10s", False, "ann"
    )  # fmt: skip
    assert runtime_schedules.from_row(row) == s
    assert _runtime_tick(store, s, T0) == []  # first seen: starts with its next tick
    assert len(_runtime_tick(store, s, T0 + 10)) == 1
    assert _runtime_tick(store, s, T0 + 10) == []  # the tick is made once


def test_code_wins_and_a_name_is_added_once(store: Store) -> None:
    code = Schedule(name="beat", task="beat", every=10)
    tick(store, code, T0)  # a worker ran the code schedule: its row, no definition
    s = runtime_schedules.build("beat", "other", every=5)
    with pytest.raises(ConfigError, match="declared in code"):
        runtime_schedules.add(store, s, by="ann")
    with pytest.raises(ConfigError, match="declared in code"):
        store.remove_schedule("beat")
    assert _row(store, "beat")["definition"] is None
    r = runtime_schedules.build("r", "t", every=5)
    runtime_schedules.add(store, r, by="ann")
    with pytest.raises(ConfigError, match="exists"):
        runtime_schedules.add(store, runtime_schedules.build("r", "t", every=7), by="bob")
    assert _row(store, "r")["spec"] == "every 5s"
    # a code schedule deployed later under a runtime name takes the name at its first tick
    tick(store, Schedule(name="r", task="t", every=5), T0)
    assert _row(store, "r")["definition"] is None
    assert _runtime_tick(store, r, T0 + 5) == []  # the runtime one no longer ticks


def test_a_change_replans_and_a_removal_stops_it(store: Store) -> None:
    s = runtime_schedules.build("r", "t", every=10)
    runtime_schedules.add(store, s, by="ann")
    _runtime_tick(store, s, T0)
    assert _row(store, "r")["next_tick"] == T0 + 10
    faster = runtime_schedules.build("r", "t", every=2)
    assert runtime_schedules.add(store, faster, replace=True, by="bob") is False
    row = _row(store, "r")
    assert (row["spec"], row["next_tick"], row["changed_by"]) == ("every 2s", None, "bob")
    assert len(_runtime_tick(store, faster, T0 + 2)) == 1
    assert store.remove_schedule("r") is True
    assert store.remove_schedule("r") is False
    assert [r["name"] for r in store.list_schedules()] == []
    assert _runtime_tick(store, faster, T0 + 4) == []  # a worker's stale read: nothing


def test_a_paused_schedule_ticks_nothing_until_resumed(store: Store) -> None:
    s = runtime_schedules.build("r", "t", every=10)
    runtime_schedules.add(store, s, paused=True, by="ann")
    assert _row(store, "r")["paused"] is True
    assert _runtime_tick(store, s, T0 + 10) == []  # read as running: refused, row paused
    assert store.pause_schedule("r", False, by="bob") is True
    assert _row(store, "r")["paused"] is False
    assert store.pause_schedule("missing", True, by="bob") is False
    code = Schedule(name="beat", task="beat", every=10)
    tick(store, code, T0)
    assert store.pause_schedule("beat", True, by="bob") is True  # code ones too


@pytest.mark.parametrize(
    ("name", "kwargs", "says"),
    [
        ("", {"every": 1}, "non-empty"),
        ("x", {"cron": "61 * * * *"}, "bad cron"),
        ("x", {}, "either cron= or every="),
        ("x", {"every": 0.5}, "at least 1"),
        ("x", {"every": 1, "tz": "Mars/Base"}, "time zone"),
        ("x", {"every": 1, "catch_up": "some"}, "catch_up"),
        ("x", {"every": 1, "args": [1]}, "JSON object"),
        ("x", {"every": 1, "queue": ""}, "queue name"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    store: Store, name: str, kwargs: dict[str, object], says: str
) -> None:
    with pytest.raises(ConfigError, match=says) as refused:
        runtime_schedules.build(name, "t", **kwargs)  # type: ignore[arg-type]
    assert "\n" not in str(refused.value)
    assert store.list_schedules() == []
