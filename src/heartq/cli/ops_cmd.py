"""`heartq reclaim` (one maintenance pass, by hand) and `heartq stats` (the queue at a glance)."""

from __future__ import annotations

import contextlib
import logging
import sys
from typing import Any

import click
from rich.text import Text

from heartq import display, events
from heartq.cli import render
from heartq.cli.common import (
    Seconds,
    json_option,
    load_app,
    print_json,
    store_for,
    url_option,
    url_typed,
)
from heartq.config import Settings
from heartq.display import plural
from heartq.event_stream import EventStream
from heartq.inspect import fairness
from heartq.inspect.fleet import GONE_HINT
from heartq.inspect.states import SHOWN_STATUSES
from heartq.inspect.stats import collect_stats
from heartq.maintenance.reclaimers import Findings, PassCutShort, reclaim_pass
from heartq.model import DeactivatedWorker, DetectedBy, JobStatus, Reclaimed


def _quiet_events() -> None:
    """The command prints its own report; keep the events it emits (for listeners) from
    reaching stderr through logging's last-resort handler."""
    logger = logging.getLogger("heartq")
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())


# -- reclaim -----------------------------------------------------------------------------


def reclaim_report(found: Findings) -> dict[str, Any]:
    """What one reclaim pass did, as `heartq reclaim --json` prints it: the workers
    marked inactive, the jobs reclaimed, how many of them are `queued` again and how
    many `dead` (`requeued`: the deprecated name of `queued`, kept for one version)."""
    workers = [_worker_doc(w, detected_by) for w, detected_by in found.workers]
    jobs = [_job_doc(j, detected_by) for w, detected_by in found.workers for j in w.reclaimed]
    jobs += [_job_doc(j, DetectedBy.LEASE_EXPIRED) for j in found.expired]
    queued = sum(1 for j in jobs if j["status"] == JobStatus.QUEUED)
    return {
        "workers_deactivated": workers,
        "reclaimed": jobs,
        "queued": queued,
        "dead": sum(1 for j in jobs if j["status"] == JobStatus.DEAD),
        "requeued": queued,
    }


def _worker_doc(worker: DeactivatedWorker, detected_by: str) -> dict[str, Any]:
    return {
        "id": worker.id,
        "name": worker.name,
        "heartbeat_age": round(worker.heartbeat_age, 3),
        "detected_by": str(detected_by),
        "job_ids": [j.job_id for j in worker.reclaimed],
    }


def _job_doc(job: Reclaimed, detected_by: str) -> dict[str, Any]:
    return {
        "job_id": job.job_id,
        "task": job.task,
        "execution_id": job.execution_id,
        "worker_id": job.worker_id,
        "status": job.status.value,
        "attempts": job.attempts,
        "detected_by": str(detected_by),
        "reason": job.crash.get("reason"),
        "retry_in": round(job.retry_delay, 3) if job.status is JobStatus.QUEUED else None,
        "dead_reason": job.dead_reason,
    }


@click.command("reclaim")
@url_option
@click.option(
    "--stale-after",
    type=Seconds(min=0, min_open=True),
    default=None,
    metavar="S",
    help=(
        "A worker silent this long is inactive, when it did not record its own threshold "
        "(each worker is judged by its own settings) [3 heartbeat intervals: 90]."
    ),
)
@click.option(
    "--app",
    "app_ref",
    metavar="APP",
    default=None,
    help=(
        "Run APP's crash hooks (module:attribute) for the attempts this pass ends crashed, "
        "as a worker's maintenance does; the queue is APP's unless --url is typed."
    ),
)
@json_option
def reclaim_command(
    url: str | None, stale_after: float | None, app_ref: str | None, as_json: bool
) -> None:
    """Reclaim now what crashed: expired leases, stale workers, gone worker processes.

    Every worker does this on its own every reclaim interval; this is one pass by hand.
    """
    _quiet_events()
    settings = Settings.from_env()
    app = load_app(app_ref) if app_ref is not None else None
    if app is not None and not url_typed(click.get_current_context()):
        url = app.url  # as for `heartq worker`: a typed --url beats the app's own
    store = store_for(url, existing=True)
    threshold = stale_after if stale_after is not None else settings.stale_after_seconds
    stream = app.events if app is not None else EventStream()  # no app: no hooks to run
    try:
        found = reclaim_pass(store, stream, threshold, settings.reclaim_batch)
    except PassCutShort as cut:  # what landed is told before the error's one line
        _tell_crashes(stream, cut.found)
        raise cut.cause from None
    _tell_crashes(stream, found)
    report = reclaim_report(found)
    if as_json:
        print_json(report)
        return
    console = render.make_console()
    for worker in report["workers_deactivated"]:
        how = (
            "its process is gone"
            if worker["detected_by"] == DetectedBy.LIVENESS_LOCK
            else f"no heartbeat for {display.fmt_seconds(worker['heartbeat_age'])}"
        )
        console.print(
            f"worker {worker['id']} marked inactive: {how} "
            f"({plural(len(worker['job_ids']), 'job')} reclaimed)"
        )
    jobs = report["reclaimed"]
    if not jobs:
        if not report["workers_deactivated"]:
            console.print("nothing to reclaim: no expired lease, no stale or gone worker")
        return
    t = render.table("JOB", "TASK", "DETECTED BY", "NOW")
    for job in jobs:
        if job["status"] == JobStatus.DEAD:
            now_text = Text("dead", style=render.STATUS_STYLES["dead"])
        else:
            now_text = Text(
                f"queued, retry in {display.fmt_seconds(job['retry_in'])}",
                style=render.STATUS_STYLES["queued"],
            )
        t.add_row(job["job_id"], Text(job["task"]), job["detected_by"], now_text)
    render.fit(t, console.width, shrink=("TASK",))
    console.print(t)
    console.print(
        f"reclaimed {len(jobs)} job{'s' * (len(jobs) != 1)}: "
        f"{report['queued']} queued again, {report['dead']} dead"
    )


def _tell_crashes(stream: EventStream, found: Findings) -> None:
    """APP's crash hooks (its stream's) for what the pass ended crashed. What they print
    goes to stderr (stdout is the report, `--json`'s included); a hook that failed is one
    line there too, since this command keeps heartq's events to itself."""
    failures: list[dict[str, Any]] = []

    def heard(event: events.Event) -> None:
        if event.name == events.HOOK_FAILED:
            failures.append(event.fields)

    stream.subscribe(heard)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            stream.crashed(found.reclaimed())
    finally:
        stream.unsubscribe(heard)
    for failure in failures:
        click.echo(
            f"crash hook {failure['hook']} failed ({failure['stage']}): {failure['error']}",
            err=True,
        )


# -- stats -------------------------------------------------------------------------------


def rate_summary(key: dict[str, Any]) -> str:
    """One rate key as `heartq stats` lists it: `api 30/s: 30 started, next in 0.4s`."""
    text = f"{key['key']} {key['limit']}: {key['started']} started"
    if key["next_start_in"] is not None:
        text += f", next in {display.fmt_seconds(key['next_start_in'])}"
    return text


@click.command("stats")
@url_option
@json_option
def stats_command(url: str | None, as_json: bool) -> None:
    """Jobs by queue and state, workers, the longest wait, the dead-letter queue."""
    store = store_for(url, existing=True, reading=True)
    stats = collect_stats(store)
    if as_json:
        print_json(stats)
        return
    console = render.make_console()
    t = render.table("QUEUE", *(s.upper() for s in SHOWN_STATUSES), "TOTAL")
    for column in t.columns[1:]:
        column.justify = "right"
    for queue, counts in sorted(stats["jobs"].items()):
        t.add_row(Text(queue), *(str(counts[s]) for s in SHOWN_STATUSES), str(sum(counts.values())))
    totals = stats["totals"]
    if len(stats["jobs"]) != 1:
        t.add_row(
            Text("all", style="bold"), *(str(totals[s]) for s in SHOWN_STATUSES), str(totals["all"])
        )
    render.fit(t, console.width, shrink=("QUEUE",))
    console.print(Text(f"queue {stats['url']}", style="dim"))
    if stats["jobs"]:
        console.print(t)
    else:
        console.print("no jobs")
    w = stats["workers"]
    workers = f"{w['active']} active, running {w['running_jobs']} of {plural(w['slots'], 'slot')}"
    if w["claimed_ahead_jobs"]:
        workers += f", {w['claimed_ahead_jobs']} claimed ahead"
    if w["max_heartbeat_age"] is not None:
        workers += f", oldest heartbeat {w['max_heartbeat_age']:.1f}s ago"
    rows: list[tuple[str, str | Text]] = [("workers", workers)]
    if w["gone"]:
        held = w["gone_running_jobs"] + w["gone_claimed_ahead_jobs"]
        rows.append(
            (
                "gone",
                Text(
                    f"{w['gone']} worker{'s' * (w['gone'] != 1)} holding {held} "
                    f"job{'s' * (held != 1)}: {GONE_HINT}",
                    style=render.STATUS_STYLES["gone"],
                ),
            )
        )
    if stats["oldest_queued_age"] is not None:
        rows.append(
            (
                "longest wait",
                f"{display.fmt_seconds(stats['oldest_queued_age'])} "
                f"(job {stats['oldest_queued_job']})",
            )
        )
    else:
        rows.append(("longest wait", "-  (no job waiting to run)"))
    if stats["scheduled"]:
        waits = "waits for its" if stats["scheduled"] == 1 else "wait for their"
        rows.append(("scheduled", f"{plural(stats['scheduled'], 'queued job')} {waits} run_at"))
    c = stats["concurrency"]
    if c["keys"]:
        busiest = ", ".join(f"{k['key']} {k['running']}/{k['limit']}" for k in c["busiest"])
        rows.append(
            (
                "concurrency",
                f"{plural(c['keys'], 'key')} with live jobs, {c['at_limit']} at their limit, "
                f"{plural(c['queued'], 'keyed job')} waiting (busiest: {busiest})",
            )
        )
    r = stats["rate_limits"]
    if r["keys"]:
        busiest = ", ".join(rate_summary(k) for k in r["busiest"])
        rows.append(
            (
                "rate limits",
                f"{plural(r['keys'], 'key')} with live jobs, {r['at_limit']} at their limit, "
                f"{plural(r['waiting'], 'due job')} waiting (busiest: {busiest})",
            )
        )
    f = stats["fairness"]
    if f["keys"]:
        busiest = ", ".join(
            f"{k['queue']}/{k['key']} {k['running']} running "
            f"{fairness.queued_text(k)} queued"
            for k in f["busiest"]
        )
        rows.append(
            (
                "fairness",
                f"{plural(f['keys'], 'key')} in use in {plural(f['queues'], 'queue')}, "
                f"{f['waiting']} with jobs waiting (busiest: {busiest}; heartq queues)",
            )
        )
    p = stats["periodic"]
    if p["schedules"]:
        when = "-" if p["next_tick_in"] is None else f"in {display.fmt_seconds(p['next_tick_in'])}"
        schedules = plural(p["schedules"], "schedule")
        rows.append(("periodic", f"{schedules}, next tick {when} (heartq periodic)"))
    if stats["paused_queues"] or stats["capped_queues"]:
        held = [f"{q} paused" for q in stats["paused_queues"]]
        held += [f"{q} at most {n} a worker" for q, n in sorted(stats["capped_queues"].items())]
        rows.append(("controlled", Text(", ".join(held) + "  (heartq queues)", style="yellow")))
    dead = Text(f"{stats['dead']} dead job{'s' * (stats['dead'] != 1)}")
    if stats["dead"]:
        dead.stylize("bold red")
        dead.append("  (heartq dlq list)", style="dim")
    rows.append(("dead letters", dead))
    console.print()
    console.print(render.key_values(rows))
