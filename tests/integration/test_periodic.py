"""Periodic schedules served by real worker processes: each tick one job across the
fleet, none doubled, none skipped while a worker lives, and no leader whose death stops
the schedule (docs/design/policies.md, "Periodic jobs")."""

from __future__ import annotations

import itertools
import textwrap

from tests.integration.conftest import Harness
from tests.integration.worker_tasks import TASKS_SOURCE

SCHEDULED = TASKS_SOURCE + textwrap.dedent(
    '''

    @app.periodic(every=1, args={"value": "tick"})
    @app.task
    def beat(ctx, value=None):
        return ident(ctx, value=value)
    '''
)


BEFORE = 5
"""Ticks (one a second) made before the ticker is killed: enough for three workers to race
for each, not more (each costs the test a second)."""
AFTER = 3
"""Ticks made after the kill, by the workers left."""


def ticks(h: Harness) -> list[int]:
    """The tick (ms since the epoch) of every job the schedule made, sorted."""
    keys = [j["unique_key"] for j in h.store.list_jobs(limit=1000) if j["task"] == "beat"]
    return sorted(int(key.rsplit("@", 1)[1]) for key in keys)


def ran_after(h: Harness, tick: int) -> set[str]:
    """The workers that ran the jobs of the ticks after `tick` (ms since the epoch)."""
    return {
        execution["worker_id"]
        for j in h.store.list_jobs(limit=1000)
        if j["task"] == "beat" and int(j["unique_key"].rsplit("@", 1)[1]) > tick
        for execution in h.job(j["id"])["executions"]
    }


def test_three_workers_make_one_job_per_tick_and_survive_the_ticker_dying(
    harness: Harness,
) -> None:
    h = harness
    (h.dir / "tasks.py").write_text(SCHEDULED)
    workers = [h.start_worker(wait=False) for _ in range(3)]
    for worker in workers:
        h.wait_started(worker)
    h.wait_for(lambda: len(ticks(h)) >= BEFORE, 40, f"{BEFORE} ticks", lambda: ticks(h))
    (schedule,) = h.store.list_schedules()
    ticker = h.by_id(schedule["updated_by"])  # the worker that enqueued the last tick
    ticker.kill()
    at_kill = ticks(h)[-1]
    h.wait_for(
        lambda: len([t for t in ticks(h) if t > at_kill]) >= AFTER,
        20,
        f"{AFTER} more ticks after the ticker died",
        lambda: ticks(h),
    )
    # a tick's job is an ordinary job, run by whichever worker claims it: one made after
    # the ticker died runs on another (which one is the claim's race)
    h.wait_for(lambda: ran_after(h, at_kill), 20, "a tick after the kill run", lambda: ticks(h))
    for worker in workers:
        if worker is not ticker:
            worker.kill()
    made = ticks(h)
    assert len(made) == len(set(made)), made  # none doubled
    gaps = [b - a for a, b in itertools.pairwise(made)]
    assert set(gaps) == {1000}, made  # none skipped, before or after the kill
    assert schedule["updated_by"] not in ran_after(h, at_kill)
    job = h.job(h.store.list_jobs(limit=1)[0]["id"])
    assert job["schedule"] == "beat" and job["args"] == {"value": "tick"}
