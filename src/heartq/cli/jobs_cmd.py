"""`heartq jobs list|show|cancel`."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table
from rich.text import Text

from heartq import display, ids
from heartq.cli import render
from heartq.cli.common import json_option, limit_option, print_json, store_for, url_option
from heartq.cli.job_view import job_view, last_error
from heartq.cli.watch_cmd import watch_command
from heartq.inspect import jobs as inspect_jobs
from heartq.inspect.jobs import job_detail
from heartq.inspect.states import SHOWN_STATUSES, shown_status
from heartq.model import CancelResult


def status_choice() -> click.Choice[str]:
    """The shown states: `claimed` (claimed ahead, not started) apart from `running`."""
    return click.Choice(SHOWN_STATUSES)


@click.group("jobs")
def jobs_group() -> None:
    """List, inspect and cancel jobs."""


@jobs_group.command("list")
@url_option
@click.option("--status", type=status_choice(), default=None, help="Only jobs in this state.")
@click.option("--queue", default=None, help="Only jobs of this queue.")
@limit_option
@json_option
def list_command(
    url: str | None, status: str | None, queue: str | None, limit: int, as_json: bool
) -> None:
    """The newest jobs, with their state and attempts."""
    store = store_for(url, existing=True, reading=True)
    jobs = inspect_jobs.list_jobs(store, status=status, queue=queue, limit=limit)
    if as_json:
        print_json(jobs)
        return
    now = store.clock()
    console = render.make_console()
    if not jobs:
        where = f" in queue {queue!r}" if queue else ""
        console.print(f"no {status + ' ' if status else ''}jobs{where}")
        return
    console.print(jobs_table(jobs, now, console.width))
    if len(jobs) == limit:
        console.print(f"{limit} newest shown; there may be more (--limit N)", style="dim")


def jobs_table(jobs: list[dict[str, Any]], now: float, width: int) -> Table:
    """One job a line. The queue column is left out when every job is of one queue (the
    table's title names it), so the table fits 80 columns with the full ids."""
    queues = sorted({job["queue"] for job in jobs})
    one_queue = len(queues) == 1
    names = ["ID", "TASK", "STATUS", "TRIES", "AGE"]
    if not one_queue:
        names.insert(2, "QUEUE")
    t = render.table(*names, title=f"queue {queues[0]}" if one_queue else None)
    for job in jobs:
        cells: list[str | Text] = [
            job["id"],
            Text(job["task"]),
            render.status_text(job["status"]),
            _tries(job),
            display.fmt_seconds(display.age(job.get("created_at"), now)),
        ]
        if not one_queue:
            cells.insert(2, Text(job["queue"]))
        t.add_row(*cells)
    render.fit(t, width, shrink=("TASK", "QUEUE"))
    return t


def _tries(job: dict[str, Any]) -> str:
    return f"{job['attempts']}/{job['max_retries'] + 1}"


@jobs_group.command("show")
@click.argument("job_id", metavar="ID")
@url_option
@json_option
def show_command(job_id: str, url: str | None, as_json: bool) -> None:
    """One job: its state, arguments, result or error, and the timeline of its attempts."""
    store = store_for(url, existing=True, reading=True)
    job = job_detail(store, store.resolve_job_id(job_id))
    if as_json:
        print_json(job)
        return
    console = render.make_console()
    console.print(job_view(job, store.clock()))
    for line in last_error(job):
        console.print(line, soft_wrap=True)


CANCEL_REQUESTED = (
    "its worker tells the task within about a second (ctx.cancelled; ctx.heartbeat() "
    "raises Cancelled), and ends the attempt after a grace of at most 5 s if the task "
    "does not stop by itself"
)
"""What a cancel of a running job does, as an operator reads it (`jobs cancel`, the
dashboard's notice): the worker hears of it within about a second, but a task that never
looks stops only at the grace's end (min(5 s, the heartbeat interval))."""


@jobs_group.command("cancel")
@click.argument("job_id", metavar="ID")
@url_option
@json_option
def cancel_command(job_id: str, url: str | None, as_json: bool) -> None:
    """Cancel a queued or waiting job, or ask a running job's worker to stop it."""
    store = store_for(url, existing=True)
    job_id = store.resolve_job_id(job_id)
    result = store.cancel_job(job_id, by=ids.requester("heartq jobs cancel"))
    status = shown_status(store.get_job(job_id))
    if as_json:
        print_json({"id": job_id, "result": result.value, "status": status})
        return
    if result is CancelResult.CANCELLED:
        click.echo(f"cancelled job {job_id} (it had not started: it will not run)")
    elif result is CancelResult.CANCEL_REQUESTED:
        click.echo(f"cancel requested for job {job_id}: {CANCEL_REQUESTED}")
    else:
        click.echo(f"job {job_id} already finished ({status}): nothing to cancel")


jobs_group.add_command(watch_command)
