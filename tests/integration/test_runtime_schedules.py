"""Periodic schedules added, changed and removed while real workers run
(`App.add_schedule`, `remove_schedule`; heartq.runtime_schedules): three workers without
a restart pick each change up within a second or two, and still make each tick one job
across the fleet."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator

import pytest

import heartq
from tests.conftest import on_every_backend
from tests.integration.conftest import Harness

WORKERS = 3


def ticks(h: Harness, name: str) -> list[int]:
    """The tick (ms since the epoch) of every job of schedule `name`, one per job, sorted."""
    prefix = f"periodic:{name}@"
    keys = [j["unique_key"] or "" for j in h.store.list_jobs(limit=1000)]
    return sorted(int(k.rsplit("@", 1)[1]) for k in keys if k.startswith(prefix))


def one_job_each(made: list[int], step_ms: int) -> None:
    assert max(Counter(made).values()) == 1, made  # none doubled
    assert {b - a for a, b in itertools.pairwise(made)} == {step_ms}, made  # none skipped


@pytest.fixture
def app(harness: Harness) -> Iterator[heartq.App]:
    app = heartq.App(harness.url)
    yield app
    app.close()


@on_every_backend  # the row locked per tick: FOR UPDATE, or SQLite's write lock
def test_a_runtime_schedule_ticks_once_across_three_workers_changes_and_stops(
    harness: Harness, app: heartq.App
) -> None:
    h = harness
    workers = [h.start_worker(wait=False) for _ in range(WORKERS)]
    for worker in workers:
        h.wait_started(worker)
    assert app.add_schedule("rt", "ident", every=1, args={"value": "rt"}) is True
    h.wait_for(lambda: len(ticks(h, "rt")) >= 3, 20, "3 ticks of rt", lambda: ticks(h, "rt"))
    one_job_each(ticks(h, "rt"), 1000)
    job = h.job(h.store.list_jobs(limit=1)[0]["id"])
    assert job["schedule"] == "rt" and job["args"] == {"value": "rt"}

    assert app.add_schedule("rt", "ident", every=2, replace=True) is False  # a change
    changed = round(h.store.clock() * 1000)
    h.wait_for(
        lambda: len([t for t in ticks(h, "rt") if t > changed + 1000]) >= 2,
        20,
        "2 ticks of the changed spec",
        lambda: ticks(h, "rt"),
    )
    after = [t for t in ticks(h, "rt") if t > changed + 1000]
    assert all(t % 2000 == 0 for t in after), after
    one_job_each(after, 2000)

    assert app.remove_schedule("rt") is True
    removed = round(h.store.clock() * 1000)
    # a schedule added after the removal ticking proves every scheduler read the rows since
    app.add_schedule("probe", "ident", every=1)
    h.wait_for(lambda: len(ticks(h, "probe")) >= 2, 20, "2 probe ticks")
    assert max(ticks(h, "rt")) <= removed, (removed, ticks(h, "rt"))
    assert [s["name"] for s in h.store.list_schedules()] == ["probe"]
    assert all(w.alive() for w in workers)
    tickers = {s["updated_by"] for s in h.store.list_schedules()}
    assert tickers <= {w.id for w in workers}


def last_tick_ms(h: Harness, name: str) -> int:
    (row,) = [r for r in h.store.list_schedules() if r["name"] == name]
    return round((row["last_tick"] or 0) * 1000)


def test_a_paused_schedule_makes_no_job_and_resumes_at_its_next_tick(
    harness: Harness, app: heartq.App
) -> None:
    h = harness
    h.start_worker()
    app.add_schedule("rt", "ident", every=1)
    h.wait_for(lambda: ticks(h, "rt"), 20, "a tick of rt")
    assert app.pause_schedule("rt") is True
    paused = round(h.store.clock() * 1000)
    # its last tick moving on twice proves the scheduler passed it, paused, with no job
    h.wait_for(lambda: last_tick_ms(h, "rt") >= paused + 2000, 20, "2 ticks passed paused")
    assert max(ticks(h, "rt")) <= paused, (paused, ticks(h, "rt"))
    passed = last_tick_ms(h, "rt")  # the resume plans from here on, or from later
    assert app.resume_schedule("rt") is True
    h.wait_for(lambda: max(ticks(h, "rt")) > passed, 20, "a tick after the resume")
    assert not [t for t in ticks(h, "rt") if paused < t <= passed]  # the pause not caught up
