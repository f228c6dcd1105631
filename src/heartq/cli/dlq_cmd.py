"""`heartq dlq list|replay|purge`: the dead-letter queue."""

from __future__ import annotations

import sys
from typing import Any

import click
from rich.console import Group
from rich.padding import Padding
from rich.text import Text

from heartq import display
from heartq.cli import render
from heartq.cli.common import (
    Seconds,
    json_option,
    limit_option,
    print_json,
    store_for,
    url_option,
)
from heartq.errors import AmbiguousJobId, JobNotFound
from heartq.model import JobStatus


@click.group("dlq")
def dlq_group() -> None:
    """The dead-letter queue: jobs that ran out of retries or failed for good."""


@dlq_group.command("list")
@url_option
@click.option("--queue", default=None, help="Only dead jobs of this queue.")
@limit_option
@json_option
def list_command(url: str | None, queue: str | None, limit: int, as_json: bool) -> None:
    """Dead jobs, newest first, with why they died."""
    store = store_for(url, existing=True, reading=True)
    jobs = store.list_jobs(status=JobStatus.DEAD.value, queue=queue, limit=limit)
    if as_json:
        print_json(jobs)
        return
    console = render.make_console()
    if not jobs:
        console.print("the dead-letter queue is empty")
        return
    console.print(dead_jobs_view(jobs, store.clock()))
    if len(jobs) == limit:
        console.print(f"{limit} newest shown; there may be more (--limit N)", style="dim")
    console.print("replay: heartq dlq replay ID ...   inspect: heartq jobs show ID", style="dim")


def dead_jobs_view(jobs: list[dict[str, Any]], now: float) -> Group:
    """Each dead job: its id, task and queue, then when and why it died (indented)."""
    parts: list[Any] = []
    for job in jobs:
        head = Text(job["id"], style="bold")
        head.append(f"  {job['task']}  queue {job['queue']}")
        died = display.fmt_seconds(display.age(job.get("finished_at"), now))
        why = Text(
            f"died {died} ago after {job['attempts']} of {job['max_retries'] + 1} tries",
            style=render.STATUS_STYLES["dead"],
        )
        reason = display.last_line(job.get("dead_reason") or job.get("error"), 500)
        if reason:
            why.append(f": {reason}", style="")
        parts.append(head)
        parts.append(Padding(why, (0, 0, 0, 4)))
    return Group(*parts)


@dlq_group.command("replay")
@click.argument("job_ids", metavar="[ID]...", nargs=-1)
@click.option("--all", "replay_all", is_flag=True, help="Replay every dead job.")
@url_option
@json_option
def replay_command(
    job_ids: tuple[str, ...], replay_all: bool, url: str | None, as_json: bool
) -> None:
    """Replay dead jobs (the given IDs, or --all), keeping their history.

    Exits 1 when some of the given IDs are unknown or not dead; the others are replayed.
    """
    if replay_all and job_ids:
        raise click.UsageError("give job IDs or --all, not both")
    if not replay_all and not job_ids:
        raise click.UsageError("give the IDs of the dead jobs to replay, or --all")
    store = store_for(url, existing=True)
    not_found: list[str] = []
    ambiguous: dict[str, str] = {}
    wanted: list[str] = []
    for ref in dict.fromkeys(job_ids):
        try:
            wanted.append(store.resolve_job_id(ref))
        except JobNotFound:
            not_found.append(ref)
        except AmbiguousJobId as exc:
            ambiguous[ref] = str(exc)
    wanted = list(dict.fromkeys(wanted))
    replayed = store.replay_dead(None if replay_all else wanted) if replay_all or wanted else []
    not_dead: dict[str, str] = {}
    done = set(replayed)
    for job_id in wanted:
        if job_id not in done:
            try:
                not_dead[job_id] = store.get_job(job_id)["status"]
            except JobNotFound:
                not_found.append(job_id)
    if as_json:
        print_json(
            {
                "replayed": replayed,
                "not_found": not_found,
                "not_dead": not_dead,
                "ambiguous": sorted(ambiguous),
            }
        )
    else:
        if replayed:
            noun = "job" if len(replayed) == 1 else "jobs"
            click.echo(f"replayed {len(replayed)} dead {noun}:")
            for job_id in replayed:
                click.echo(f"  {job_id}")
        elif replay_all:
            click.echo("the dead-letter queue is empty: nothing to replay")
        for job_id in not_found:
            click.echo(f"heartq: error: no job with id {job_id!r}", err=True)
        for message in ambiguous.values():
            click.echo(f"heartq: error: {message}", err=True)
        for job_id, status in not_dead.items():
            click.echo(f"heartq: error: job {job_id} is {status}, not dead: not replayed", err=True)
    if not_found or not_dead or ambiguous:
        raise click.exceptions.Exit(1)


@dlq_group.command("purge")
@click.option(
    "--older-than",
    type=Seconds(min=0),
    default=None,
    metavar="S",
    help="Only jobs dead for longer than S seconds [all dead jobs].",
)
@click.option("--yes", "-y", is_flag=True, help="Do not ask: purge (needed without a terminal).")
@url_option
@json_option
def purge_command(older_than: float | None, yes: bool, url: str | None, as_json: bool) -> None:
    """Delete dead jobs and their history for good; prints the ids it removed.

    Asks first on a terminal; without one (a script, a pipe) it needs --yes, since
    nothing brings a purged job back."""
    store = store_for(url, existing=True)
    if not yes:
        pending = store.purge_dead_ids(older_than, dry_run=True)
        if not pending:
            _report_purged([], older_than, as_json)
            return
        what = _dead_jobs(len(pending), older_than)
        if not sys.stdin.isatty():
            raise click.UsageError(
                f"dlq purge would delete {what} for good: add --yes to confirm "
                "(no terminal to ask on)"
            )
        click.confirm(f"delete {what} and their history for good?", abort=True)
    _report_purged(store.purge_dead_ids(older_than), older_than, as_json)


def _dead_jobs(count: int, older_than: float | None) -> str:
    """`3 dead jobs`, `1 job dead for over 1h00m`."""
    noun = "job" if count == 1 else "jobs"
    if older_than is None:
        return f"{count} dead {noun}"
    return f"{count} {noun} dead for over {display.fmt_seconds(older_than)}"


def _report_purged(ids: list[str], older_than: float | None, as_json: bool) -> None:
    if as_json:
        print_json({"purged": len(ids), "older_than": older_than, "ids": ids})
        return
    click.echo(f"purged {_dead_jobs(len(ids), older_than)}{':' if ids else ''}")
    for job_id in ids:
        click.echo(f"  {job_id}")
