"""`heartq workers`: the worker registry, with each worker's heartbeat age, the jobs it
runs and those it claimed ahead (not started), and the attempts whose code it abandoned
(their end decided, their thread still running)."""

from __future__ import annotations

import click
from rich.text import Text

from heartq.cli import render
from heartq.cli.common import json_option, print_json, store_for, url_option
from heartq.display import plural
from heartq.inspect import fleet
from heartq.inspect.fleet import ABANDONED_HINT, CLAIMED_AHEAD_HINT, GONE_HINT


@click.command("workers")
@click.option(
    "--all", "include_all", is_flag=True, help="Stopped and inactive workers too (kept 7 days)."
)
@url_option
@json_option
def workers_command(include_all: bool, url: str | None, as_json: bool) -> None:
    """Workers and what they hold (only active ones unless --all)."""
    store = store_for(url, existing=True, reading=True)
    workers = fleet.workers(store, include_all=include_all)
    if as_json:
        print_json(workers)
        return
    console = render.make_console()
    if not workers:
        console.print("no workers" if include_all else "no active workers (--all for the rest)")
        return
    t = render.table("ID", "NAME", "STATUS", "QUEUES", "JOBS", "AHEAD", "ABANDONED", "HEARTBEAT")
    for column in t.columns[4:]:
        column.justify = "right"
    for worker in workers:
        age = worker["heartbeat_age"]
        t.add_row(
            worker["id"],
            Text(worker.get("name") or "-"),
            render.status_text("gone" if worker["gone"] else worker["status"]),
            Text(",".join(worker.get("queues") or [])),
            f"{worker['running']}/{worker['concurrency']}",
            str(worker["claimed_ahead"]),
            str(worker["abandoned"]),
            "-" if age is None else f"{age:.1f}s ago",
        )
    render.fit(t, console.width, shrink=("NAME", "QUEUES"), wrap=("ID",))
    console.print(t)
    active = [w for w in workers if w["status"] == "active" and not w["gone"]]
    running = sum(w["running"] for w in active)
    slots = sum(w["concurrency"] for w in active)
    ahead = sum(w["claimed_ahead"] for w in active)
    console.print(
        f"{len(active)} active, running {running} of {plural(slots, 'slot')}"
        f"{f', {ahead} claimed ahead' if ahead else ''}; "
        "HEARTBEAT is the age of the last heartbeat",
        style="dim",
    )
    if ahead:
        console.print(Text(f"{ahead} claimed ahead: {CLAIMED_AHEAD_HINT}", style="dim"))
    abandoned = sum(w["abandoned"] for w in active)
    if abandoned:
        console.print(
            Text(f"{abandoned} abandoned: {ABANDONED_HINT}", style="yellow")
        )
    gone = [w for w in workers if w["gone"]]
    if gone:
        held = sum(w["running"] + w["claimed_ahead"] for w in gone)
        console.print(
            Text(
                f"{len(gone)} gone, holding {held} job{'s' * (held != 1)}: {GONE_HINT}",
                style=render.STATUS_STYLES["gone"],
            )
        )
