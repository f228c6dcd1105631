"""Periodic schedules added, changed, paused and removed while workers run
(`App.add_schedule` and its kin, `heartq periodic add|remove|pause|resume`, the
dashboard's schedules page).

Why stored in the schedule's own row: the row of `schedules` is already what makes each
tick one job across the fleet (locked while a tick is enqueued, `heartq.periodic`); a
runtime schedule's definition (what `@app.periodic` says in code: cron or every, tz,
args, catch_up, and a queue) is written there, so it ticks by exactly the same path, and
every worker with `periodic` on already reads those rows each scheduler pass (at least
once a second): a schedule added or changed runs within a second or two, on every worker,
without a restart, and a worker started later runs it too.

Code and runtime schedules share one namespace of names, and code wins:
- adding a runtime schedule under the name of a code schedule the fleet has run (a row
  without a definition), or that the calling app declares, is refused in one line;
- a code schedule deployed later under a runtime schedule's name takes the name over at
  its first tick (the runtime definition is dropped; the worker logs a warning), so two
  definitions never fight over one row.

A paused schedule (runtime or code) lets its ticks pass without enqueueing them: its last
tick moves on, so a resume starts at the next tick rather than catching up the pause.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from heartq.errors import ConfigError
from heartq.periodic import Schedule
from heartq.store.interface import ScheduleEditor
from heartq.timeutil import iso

DEFINITION_FIELDS = ("cron", "every", "tz", "args", "catch_up", "queue")


def build(
    name: str,
    task: str,
    *,
    cron: str | None = None,
    every: float | None = None,
    args: Mapping[str, Any] | None = None,
    tz: str = "UTC",
    catch_up: str = "latest",
    queue: str | None = None,
) -> Schedule:
    """A runtime schedule checked as a code one is (`Schedule`): `ConfigError` in one line
    for an empty name, a bad cron expression, an `every` under a second, an unknown time
    zone or catch-up. Its args must be a JSON object (they are stored as JSON)."""
    if args is not None and not isinstance(args, Mapping):
        raise ConfigError(f"schedule {name!r}: args must be a JSON object, not {args!r}")
    try:
        json.dumps(dict(args or {}))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"schedule {name!r}: args must be JSON: {exc}") from None
    if isinstance(every, bool) or (every is not None and not isinstance(every, (int, float))):
        raise ConfigError(f"schedule {name!r}: every must be a number of seconds")
    return Schedule(
        name=name,
        task=task,
        cron=cron,
        every=None if every is None else float(every),
        args=dict(args or {}),
        tz=tz,
        catch_up=catch_up,
        queue=queue,
    )


def definition(schedule: Schedule) -> dict[str, Any]:
    """What the row stores of a runtime schedule (its name and task have columns)."""
    return {
        "cron": schedule.cron,
        "every": schedule.every,
        "tz": schedule.tz,
        "args": dict(schedule.args),
        "catch_up": schedule.catch_up,
        "queue": schedule.queue,
    }


def from_row(row: Mapping[str, Any]) -> Schedule:
    """The runtime schedule a row of `Store.list_schedules` defines (`ConfigError` for a
    definition no heartq wrote, which the scheduler skips)."""
    found = row["definition"]
    if not isinstance(found, Mapping):
        raise ConfigError(f"schedule {row['name']!r}: its stored definition is not an object")
    return build(
        row["name"],
        row["task"],
        **{k: found[k] for k in DEFINITION_FIELDS if found.get(k) is not None},
    )


def schedule_dict(row: Mapping[str, Any]) -> dict[str, Any]:
    """A schedule as `heartq periodic --json` prints it (times in ISO-8601). `last_run`
    is null for a schedule that has never enqueued a tick: the store's `last_tick` is
    where the fleet stands (a schedule first seen starts from its latest tick, run or
    not), and a schedule whose first tick is still to come has run nothing. `origin`:
    `code` (`@app.periodic`) or `runtime` (`App.add_schedule`); `changed_at` /
    `changed_by`: the last add, change, pause or resume (null: never)."""
    ran = row["last_job_id"] is not None  # kept once set: the last tick that enqueued
    defined = row["definition"]
    return {
        "name": row["name"],
        "task": row["task"],
        "spec": row["spec"],
        "origin": "code" if defined is None else "runtime",
        "paused": bool(row["paused"]),
        "queue": None if defined is None else defined.get("queue"),
        "last_run": iso(row["last_tick"]) if ran else None,
        "next_run": iso(row["next_tick"]),
        "last_job_id": row["last_job_id"],
        "last_job_status": row["last_job_status"],
        "updated_at": iso(row["updated_at"]),
        "updated_by": row["updated_by"],
        "changed_at": iso(row["changed_at"]),
        "changed_by": row["changed_by"],
    }


def add(
    store: ScheduleEditor,
    schedule: Schedule,
    *,
    paused: bool = False,
    replace: bool = False,
    by: str,
) -> bool:
    """Store `schedule` (from `build`) as a runtime schedule: True if added, False if an
    existing runtime one was replaced (`replace`). `ConfigError` in one line for the name
    of a code schedule, or of a runtime one without `replace`."""
    return store.save_schedule(
        schedule.name,
        schedule.task,
        schedule.spec,
        definition(schedule),
        paused=paused,
        replace=replace,
        by=by,
    )
