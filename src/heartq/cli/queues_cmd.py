"""`heartq queues`: each queue with its jobs and workers, and what an operator decided
of it; `heartq queues pause|resume|scale NAME` decides it, for every worker of the queue
within about a second and for every worker started later (`heartq.queue_controls`).
Under the queues, each one's busiest fairness keys (`heartq.inspect.fairness`)."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console
from rich.text import Text

from heartq import display, ids
from heartq.cli import render
from heartq.cli.common import json_option, print_json, store_for, url_option
from heartq.inspect import fairness
from heartq.inspect.queues import queue_overview


@click.group("queues", invoke_without_command=True)
@url_option
@json_option
@click.pass_context
def queues_group(ctx: click.Context, url: str | None, as_json: bool) -> None:
    """Queues: jobs waiting and running, workers, paused or scaled, fairness keys.

    \b
    heartq queues                          each queue at a glance, its busiest fair keys
    heartq queues pause NAME               no job of NAME starts until resumed
    heartq queues resume NAME
    heartq queues scale NAME --concurrency 2   at most 2 of NAME's jobs per worker
    """
    if ctx.invoked_subcommand is None:
        _show(url, as_json)


def _show(url: str | None, as_json: bool) -> None:
    store = store_for(url, existing=True, reading=True)
    rows = queue_overview(store)
    if as_json:
        print_json(rows)
        return
    console = render.make_console()
    if not rows:
        console.print("no queues: no jobs, no active workers, nothing controlled")
        return
    now = store.clock()
    t = render.table(
        "QUEUE", "STATE", "PER WORKER", "QUEUED", "RUNNING", "WORKERS", "FAIR KEYS", "CHANGED"
    )
    for column in t.columns[2:7]:
        column.justify = "right"
    for row in rows:
        t.add_row(
            Text(row["queue"]),
            Text("paused", style="bold yellow") if row["paused"] else Text("active"),
            "-" if row["concurrency"] is None else str(row["concurrency"]),
            str(row["queued"]),
            str(row["running"]),
            str(row["workers"]),
            "-" if row["fair"] is None else str(row["fair"]["keys"]),
            _changed(row, now),
        )
    render.fit(t, console.width, shrink=("QUEUE", "CHANGED"))
    console.print(t)
    console.print(
        "PER WORKER: at most that many of the queue's jobs run at once on each worker "
        "(heartq queues scale)",
        style="dim",
    )
    _fair_keys(console, rows)


def _fair_keys(console: Console, rows: list[dict[str, Any]]) -> None:
    """Each queue's busiest fairness keys (`fairness.SHOWN` of them), and how many more."""
    fair = [row for row in rows if row["fair"] is not None]
    if not fair:
        return
    t = render.table("QUEUE", "FAIR KEY", "QUEUED", "RUNNING", "WEIGHT")
    for column in t.columns[2:]:
        column.justify = "right"
    for row in fair:
        shown = row["fair"]["busiest"]
        for key in shown:
            t.add_row(
                Text(row["queue"]),
                Text(key["key"]),
                fairness.queued_text(key),
                str(key["running"]),
                fairness.weight_text(key["weight"]),
            )
        more = row["fair"]["keys"] - len(shown)
        if more:
            t.add_row(Text(row["queue"]), Text(f"... {more} more", style="dim"), "", "", "")
    render.fit(t, console.width, shrink=("QUEUE", "FAIR KEY"))
    console.print()
    console.print(t)
    console.print(
        "FAIR KEY: claims take a queue's keys in turn, by weight, among its jobs of one "
        "priority; busiest first",
        style="dim",
    )


def _changed(row: dict[str, Any], now: float) -> Text:
    if row["changed_at"] is None:
        return Text("-")
    ago = display.fmt_seconds(max(0.0, now - row["changed_at"]))
    return Text(f"{ago} ago by {row['changed_by']}")


def _decided(
    url: str | None,
    as_json: bool,
    queue: str,
    said: str,
    *,
    paused: bool | None = None,
    scale: bool = False,
    concurrency: int | None = None,
) -> None:
    """Store what `heartq queues SAID QUEUE` decided, and say what the queue is now."""
    store = store_for(url)
    by = ids.requester(f"heartq queues {said}")
    control = store.set_queue_control(
        queue, paused=paused, scale=scale, concurrency=concurrency, by=by
    )
    if as_json:
        print_json(control.as_dict())
        return
    cap = "no cap" if control.concurrency is None else f"at most {control.concurrency} a worker"
    state = "paused" if control.paused else "active"
    click.echo(f"queue {control.queue}: {state}, {cap} (workers obey within about a second)")


@queues_group.command("pause")
@click.argument("queue")
@url_option
@json_option
def pause_command(queue: str, url: str | None, as_json: bool) -> None:
    """No job of QUEUE starts until it is resumed; running ones finish, queued ones keep
    their place. Every worker obeys within about a second, and workers started later
    too."""
    _decided(url, as_json, queue, "pause", paused=True)


@queues_group.command("resume")
@click.argument("queue")
@url_option
@json_option
def resume_command(queue: str, url: str | None, as_json: bool) -> None:
    """Let QUEUE's jobs start again."""
    _decided(url, as_json, queue, "resume", paused=False)


@queues_group.command("scale")
@click.argument("queue")
@click.option(
    "--concurrency",
    required=True,
    metavar="N|none",
    help="At most N of QUEUE's jobs run at once on EACH worker (0 holds the queue); "
    "'none' lifts the cap (each worker's own --concurrency).",
)
@url_option
@json_option
def scale_command(queue: str, concurrency: str, url: str | None, as_json: bool) -> None:
    """Cap how many of QUEUE's jobs each worker runs at once (three workers scaled to 2
    run at most 6). Jobs already over the cap finish; none starts until under it."""
    cap: int | None = None
    if concurrency.strip().lower() != "none":
        try:
            cap = int(concurrency)
        except ValueError:
            raise click.BadParameter(
                f"a whole number, 0 or more, or 'none', not {concurrency!r}",
                param_hint="'--concurrency'",
            ) from None
    _decided(url, as_json, queue, "scale", scale=True, concurrency=cap)
