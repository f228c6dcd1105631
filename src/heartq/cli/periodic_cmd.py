"""`heartq periodic`: the periodic schedules the fleet runs, with their last and next
tick (read from the database: what workers have enqueued, whatever this program imports)."""

from __future__ import annotations

from typing import Any

import click
from rich.text import Text

from heartq import display
from heartq.cli import render
from heartq.cli.common import json_option, print_json, store_for, url_option
from heartq.timeutil import iso


def schedule_dict(row: dict[str, Any]) -> dict[str, Any]:
    """A schedule as `heartq periodic --json` prints it (times in ISO-8601). `last_run`
    is null for a schedule that has never enqueued a tick: the store's `last_tick` is
    where the fleet stands (a schedule first seen starts from its latest tick, run or
    not), and a schedule whose first tick is still to come has run nothing."""
    ran = row["last_job_id"] is not None  # kept once set: the last tick that enqueued
    return {
        "name": row["name"],
        "task": row["task"],
        "spec": row["spec"],
        "last_run": iso(row["last_tick"]) if ran else None,
        "next_run": iso(row["next_tick"]),
        "last_job_id": row["last_job_id"],
        "last_job_status": row["last_job_status"],
        "updated_at": iso(row["updated_at"]),
        "updated_by": row["updated_by"],
    }


@click.command("periodic")
@url_option
@json_option
def periodic_command(url: str | None, as_json: bool) -> None:
    """Periodic schedules with their last and next run, and the last tick's job."""
    store = store_for(url, existing=True, reading=True)
    schedules = [schedule_dict(row) for row in store.list_schedules()]
    if as_json:
        print_json(schedules)
        return
    console = render.make_console()
    if not schedules:
        console.print(
            "no periodic schedule yet: a worker whose app has @app.periodic tasks records "
            "each schedule when it first looks at it"
        )
        return
    now = store.clock()
    t = render.table("SCHEDULE", "TASK", "SPEC", "LAST RUN", "NEXT RUN", "LAST JOB")
    for s in schedules:
        job = "-"
        if s["last_job_id"]:
            job = f"{s['last_job_id'][-8:]} {s['last_job_status'] or 'pruned'}"
        t.add_row(
            Text(s["name"]),
            Text(s["task"]),
            Text(s["spec"]),
            display.fmt_ago(s["last_run"], now) if s["last_run"] else "never",
            display.fmt_ago(s["next_run"], now),
            job,
        )
    render.fit(t, console.width, shrink=("SCHEDULE", "TASK", "SPEC"), wrap=())
    console.print(t)
