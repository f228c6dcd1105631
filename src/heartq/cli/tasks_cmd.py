"""`heartq tasks`: the tasks workers have declared, with the policy a job of each takes
when it is enqueued by name (`heartq enqueue`, `app.enqueue("name", ...)`)."""

from __future__ import annotations

import dataclasses
from typing import Any

import click
from rich.text import Text

from heartq import display
from heartq.cli import render
from heartq.cli.common import json_option, print_json, store_for, url_option
from heartq.timeutil import iso


def task_dict(policy: Any) -> dict[str, Any]:
    """A declaration as `heartq tasks --json` prints it (times in ISO-8601)."""
    doc = dataclasses.asdict(policy)
    doc["declared_at"] = iso(policy.declared_at)
    return doc


def rate_text(task: dict[str, Any]) -> str:
    """A declared rate limit as the table shows it: `10/s per customer:{customer}`."""
    if task["rate_limit"] is None:
        return "-"
    return f"{task['rate_limit']} per {task['rate_key'] or 'task'}"


def backoff_text(task: dict[str, Any]) -> str:
    """A declared backoff as the table shows it: `5s-1h`, or `5s-1h linear, exact`, or
    explicit intervals (`1s,10s,1m`, `~` before them with jitter), after `retry_delay,
    else` for a task whose function decides first, and the exceptions its filter
    retries or not (`retry_on TimeoutError`)."""
    intervals = task.get("retry_intervals")
    if intervals:
        text = "~" if task["retry_jitter"] else ""
        text += ",".join(display.fmt_seconds(wait) for wait in intervals)
    else:
        text = f"{display.fmt_seconds(task['retry_backoff'])}-"
        text += display.fmt_seconds(task["retry_backoff_max"])
        if task["retry_schedule"] != "exponential":
            text += f" {task['retry_schedule']}"
        if not task["retry_jitter"]:
            text += " exact"
    if task.get("retry_delay"):
        text = f"retry_delay, else {text}"
    if task["retry_on"] is not None:
        text += f"; retry_on {', '.join(task['retry_on'])}"
    if task["dont_retry_on"]:
        text += f"; dont_retry_on {', '.join(task['dont_retry_on'])}"
    return text


@click.command("tasks")
@url_option
@json_option
def tasks_command(url: str | None, as_json: bool) -> None:
    """Tasks declared by workers, with the queue and policy their jobs take.

    PRIO: higher runs first (the reverse of BullMQ, Oban and Celery on Redis). RETRIES:
    retries after the first attempt, so 3 is 4 attempts (BullMQ's attempts and Oban's
    max_attempts count the first)."""
    store = store_for(url, existing=True, reading=True)
    tasks = [task_dict(p) for p in store.task_policies().values()]
    if as_json:
        print_json(tasks)
        return
    console = render.make_console()
    if not tasks:
        console.print(
            "no task declared yet: each worker declares its tasks when it starts; until "
            "then a job enqueued by name takes the defaults (queue default, 3 retries)"
        )
        return
    t = render.table(
        "TASK", "QUEUE", "PRIO", "RETRIES", "BACKOFF", "TIMEOUT", "RATE", "DECLARED"
    )
    for column in (2, 3):
        t.columns[column].justify = "right"
    now = store.clock()
    for task in tasks:
        timeout = task["timeout"]
        t.add_row(
            Text(task["name"]),
            Text(task["queue"]),
            str(task["priority"]),
            str(task["max_retries"]),
            backoff_text(task),
            "-" if timeout is None else display.fmt_seconds(timeout),
            Text(rate_text(task)),
            f"{display.fmt_ago(task['declared_at'], now)}",
        )
    render.fit(t, console.width, shrink=("TASK", "QUEUE", "RATE"), wrap=())
    console.print(t)
