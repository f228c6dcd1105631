"""`heartq demo`: watch heartq recover the jobs of a worker killed with SIGKILL.

What it does, on the embedded SQLite default with nothing to install:

1. Creates a temporary directory with a SQLite database (or uses `--url`).
2. Starts `--workers` real worker processes (`python -m heartq worker
   heartq.demo_tasks:app ...`) with demo timings: heartbeat 0.5 s, lease 1.5 s, reclaim
   0.5 s, liveness probe 0.25 s. Their JSON logs go to files in the temporary directory
   (`fleet.py`).
3. Enqueues `--jobs` jobs of 2-5 s that report progress with `ctx.heartbeat(...)`.
4. Waits until one worker holds several running jobs and kills it with a real SIGKILL.
5. Shows the survivors finding the jobs the killed worker held (the liveness lock is the fast path,
   leases the backstop) and finishing them (`scenario.py`, shown by `live.py`), then a
   summary read through the `Store` API: which jobs it held, how they were
   detected and how long detection took (`summary.py`).
6. Stops the survivors with SIGTERM and removes its processes and files (unless `--keep`).

Exit status 0 when every job succeeded and at least one was recovered from the killed
worker, 1 otherwise (with a one-line reason).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.text import Text

from heartq.cli.common import url_from_anywhere
from heartq.cli.demo.fleet import signals_raise
from heartq.cli.demo.model import DemoFailed, DemoSettings
from heartq.store import redact

if TYPE_CHECKING:
    from heartq.cli.demo.scenario import Scenario
    from heartq.cli.demo.summary import Summary


def run_scenario(scenario: Scenario, console: Console, live: bool, keep: bool) -> Summary:
    """Run the scenario with its view, stop the workers whatever happens, summarize."""
    from heartq.cli.demo.live import LiveView, StatusLines
    from heartq.cli.demo.scenario import echo_event
    from heartq.cli.demo.summary import summarize

    try:
        if live:
            with LiveView(scenario, console) as view:
                scenario.run(view.show)
        else:
            scenario.on_event = echo_event
            scenario.run(StatusLines(scenario).show)
        summary = summarize(scenario, keep)
    except BaseException:
        scenario.cleanup(graceful=False, keep=keep)
        raise
    scenario.cleanup(graceful=True, keep=keep)
    return summary


@click.command("demo")
@click.option(
    "--url",
    default=None,
    callback=url_from_anywhere,
    help="Queue URL to run the demo on [a SQLite file in a temporary directory].",
)
@click.option(
    "--jobs",
    "n_jobs",
    type=click.IntRange(min=1),
    default=30,
    show_default=True,
    help="Jobs to enqueue.",
)
@click.option(
    "--workers",
    "n_workers",
    type=click.IntRange(min=2),
    default=3,
    show_default=True,
    help="Worker processes to start (one of them is killed).",
)
@click.option("--keep", is_flag=True, help="Keep the temporary directory (database, logs).")
@click.option(
    "--no-live",
    is_flag=True,
    help="Plain progress lines instead of the live view (automatic without a TTY).",
)
def demo_command(url: str | None, n_jobs: int, n_workers: int, keep: bool, no_live: bool) -> None:
    """Watch heartq recover the jobs of a worker killed with SIGKILL.

    Starts worker processes on a temporary SQLite database, enqueues jobs, kills the
    busiest worker with SIGKILL, and shows the survivors detecting the jobs it held and
    finishing them. Exits 0 when every job succeeded and at least one was recovered.
    """
    # Imported here: the demo's tasks module makes an `App`, which reads `HEARTQ_*`; a bad
    # value must be one line from this command, not a traceback from every command.
    from heartq.cli.demo.scenario import Scenario

    console = Console(highlight=False)
    live = not no_live and console.is_terminal
    scenario = Scenario(url=url, jobs=n_jobs, workers=n_workers, settings=DemoSettings())
    if not live:
        click.echo(
            f"heartq demo: {n_jobs} jobs, {n_workers} workers, "
            f"queue {redact(scenario.url)} (workdir {scenario.workdir})"
        )
    try:
        with signals_raise():
            summary = run_scenario(scenario, console, live, keep)
    except KeyboardInterrupt:
        click.echo("heartq demo: interrupted; workers stopped", err=True)
        raise
    except DemoFailed as exc:
        raise DemoFailed(f"demo failed: {exc}") from None
    for line in summary.lines:
        if live:
            console.print(Text(line), soft_wrap=True)
        else:
            click.echo(line)
    click.echo(
        "  survivors stopped with SIGTERM; "
        + (f"files kept in {scenario.workdir}" if keep else "temporary files removed")
    )
    if not summary.ok:
        raise DemoFailed(f"demo failed: {summary.reason}")
