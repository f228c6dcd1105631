"""`heartq dlq list|replay|purge`: the dead-letter queue."""

from __future__ import annotations

import click

from heartq.cli import render
from heartq.cli.common import json_option, limit_option, print_json, store_for, url_option
from heartq.cli.jobs_cmd import dead_jobs_view
from heartq.errors import JobNotFound
from heartq.store.interface import JobStatus


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
    store = store_for(url)
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


@dlq_group.command("replay")
@click.argument("job_ids", metavar="[ID]...", nargs=-1)
@click.option("--all", "replay_all", is_flag=True, help="Replay every dead job.")
@url_option
@json_option
def replay_command(
    job_ids: tuple[str, ...], replay_all: bool, url: str | None, as_json: bool
) -> None:
    """Requeue dead jobs (the given IDs, or --all), keeping their history.

    Exits 1 when some of the given IDs are unknown or not dead; the others are requeued.
    """
    if replay_all and job_ids:
        raise click.UsageError("give job IDs or --all, not both")
    if not replay_all and not job_ids:
        raise click.UsageError("give the IDs of the dead jobs to replay, or --all")
    store = store_for(url)
    wanted = list(dict.fromkeys(job_ids))
    replayed = store.replay_dead(None if replay_all else wanted)
    not_found: list[str] = []
    not_dead: dict[str, str] = {}
    done = set(replayed)
    for job_id in wanted:
        if job_id in done:
            continue
        try:
            not_dead[job_id] = store.get_job(job_id)["status"]
        except JobNotFound:
            not_found.append(job_id)
    if as_json:
        print_json({"replayed": replayed, "not_found": not_found, "not_dead": not_dead})
    else:
        if replayed:
            noun = "job" if len(replayed) == 1 else "jobs"
            click.echo(f"requeued {len(replayed)} dead {noun}:")
            for job_id in replayed:
                click.echo(f"  {job_id}")
        elif replay_all:
            click.echo("the dead-letter queue is empty: nothing to replay")
        for job_id in not_found:
            click.echo(f"heartq: error: no job with id {job_id!r}", err=True)
        for job_id, status in not_dead.items():
            click.echo(f"heartq: error: job {job_id} is {status}, not dead: not replayed", err=True)
    if not_found or not_dead:
        raise click.exceptions.Exit(1)


@dlq_group.command("purge")
@click.option(
    "--older-than",
    type=click.FloatRange(min=0),
    default=None,
    metavar="S",
    help="Only jobs dead for longer than S seconds [all dead jobs].",
)
@url_option
@json_option
def purge_command(older_than: float | None, url: str | None, as_json: bool) -> None:
    """Delete dead jobs and their history for good."""
    store = store_for(url)
    purged = store.purge_dead(older_than)
    if as_json:
        print_json({"purged": purged, "older_than": older_than})
        return
    noun = "job" if purged == 1 else "jobs"
    if older_than is None:
        click.echo(f"purged {purged} dead {noun}")
    else:
        click.echo(f"purged {purged} {noun} dead for over {render.fmt_seconds(older_than)}")
