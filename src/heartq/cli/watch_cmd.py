"""`heartq jobs watch ID`: follow one job live until it ends.

The exit status tells a script how it ended (0 succeeded, 1 dead or cancelled), so
`heartq enqueue ... | xargs heartq jobs watch && deploy` waits for the job and acts on it.
A blocked job stops the watch too (1): a dead job holds it, and nothing moves until an
operator replays that one.
On a terminal the job's progress bar and attempts redraw in place (rich `Live`); piped,
one line is printed each time its status, attempt or progress changes.
"""

from __future__ import annotations

import time
from typing import Any

import click
from rich.console import Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from heartq.cli import render
from heartq.cli.common import Seconds, json_option, print_json, store_for, url_option
from heartq.cli.job_view import timeline
from heartq.inspect.jobs import job_detail
from heartq.model import JobStatus
from heartq.store import Store

ENDED = (JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED, JobStatus.BLOCKED)
"""Where a watch stops: the job ended, or a dead job blocks it."""
DEFAULT_INTERVAL = 0.5
"""Defaults to reading the job twice a second: one indexed read, cheap for the database."""


def exit_code(status: str) -> int:
    return 0 if status == JobStatus.SUCCEEDED else 1


def progress_line(job: dict[str, Any]) -> str:
    """`running  attempt 1/4  45%  stage scan  halfway` (what a piped watch prints)."""
    bits = [job["status"], f"attempt {job['attempts']}/{job['max_retries'] + 1}"]
    progress = job.get("progress") or {}
    if progress.get("value") is not None:
        value = progress["value"]
        bits.append(f"{value * 100:.0f}%" if 0 <= value <= 1 else f"{value:g}")
    if progress.get("stage"):
        bits.append(f"stage {progress['stage']}")
    if progress.get("message"):
        bits.append(str(progress["message"]))
    if job.get("worker_gone"):
        bits.append("(worker gone)")
    if job.get("blocked_by"):
        bits.append(f"(blocked by dead job {job['blocked_by']['id']})")
    return "  ".join(bits)


def live_view(job: dict[str, Any], now: float) -> Group:
    """The job's head line, a progress bar, and its attempts."""
    head = Text(f"{job['id']}  {job['task']}  ")
    head.append_text(render.status_text(job["status"]))
    value = (job.get("progress") or {}).get("value")
    bar = Table.grid(padding=(0, 1))
    bar.add_column(width=40)
    bar.add_column()
    fraction = value if value is not None and 0 <= value <= 1 else None
    bar.add_row(
        ProgressBar(total=1.0, completed=fraction or 0.0, pulse=fraction is None, width=40),
        Text(progress_line(job)),
    )
    return Group(head, bar, *timeline(job.get("executions") or [], now))


def read(store: Store, job_id: str) -> dict[str, Any]:
    """The job as `jobs show` reads it (the read model's `job_detail`), so `--json` ends
    with the same object, each attempt's `duration` and `detection_delay` included."""
    return job_detail(store, job_id)


@click.command("watch")
@click.argument("job_id", metavar="ID")
@click.option(
    "--interval",
    type=Seconds(min=0.05),
    default=DEFAULT_INTERVAL,
    show_default=True,
    metavar="S",
    help="Seconds between two reads of the job.",
)
@url_option
@json_option
def watch_command(job_id: str, interval: float, url: str | None, as_json: bool) -> None:
    """Follow a job live until it ends; exit 0 if it succeeded, 1 if it died, was
    cancelled or is blocked by a dead dependency. --json prints the job as `jobs show
    --json` once it has ended."""
    store = store_for(url, existing=True, reading=True)
    job_id = store.resolve_job_id(job_id)
    job = read(store, job_id)
    console = render.make_console()
    if as_json:
        while job["status"] not in ENDED:
            time.sleep(interval)
            job = read(store, job_id)
        print_json(job)
    elif console.is_terminal:
        with Live(live_view(job, store.clock()), console=console, auto_refresh=False) as live:
            while job["status"] not in ENDED:
                time.sleep(interval)
                job = read(store, job_id)
                live.update(live_view(job, store.clock()), refresh=True)
    else:
        last = ""
        while True:
            line = progress_line(job)
            if line != last:
                console.print(Text(line))
                last = line
            if job["status"] in ENDED:
                break
            time.sleep(interval)
            job = read(store, job_id)
    raise click.exceptions.Exit(exit_code(job["status"]))
