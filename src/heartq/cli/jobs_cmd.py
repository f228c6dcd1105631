"""`heartq enqueue` and `heartq jobs list|show|cancel`."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from heartq.app import App
from heartq.cli import render
from heartq.cli.common import json_option, limit_option, print_json, store_for, url_option
from heartq.config import resolve_url
from heartq.errors import ConfigError
from heartq.store.interface import JOB_STATUSES, CancelResult, JobStatus

DEFAULT_LIMIT = 100
"""`jobs list` and `dlq list` show the 100 newest jobs unless told otherwise."""
ERROR_LINES = 20
"""`jobs show` prints at most the last 20 lines of the last error (`--json` has it all)."""


def status_choice() -> click.Choice[str]:
    return click.Choice(JOB_STATUSES)


def parse_args_json(text: str | None) -> dict[str, Any]:
    """`--args` as a JSON object; one clear line saying what is wrong and where."""
    if text is None:
        return {}
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"--args is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno} "
            f"(character {exc.pos}) of {_shorten(text)!r}"
        ) from None
    if not isinstance(value, dict):
        raise ConfigError(
            f"--args must be a JSON object of keyword arguments, like '{{\"x\": 1}}', "
            f"got a JSON {_json_kind(value)}"
        )
    return value


def _refuse_constant(name: str) -> Any:
    raise ConfigError(f"--args is not valid JSON: {name} is not a JSON number")


def _shorten(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    return "number"


@click.command("enqueue")
@click.argument("task")
@url_option
@click.option(
    "--args",
    "args_text",
    metavar="JSON",
    default=None,
    help='Keyword arguments as a JSON object, e.g. \'{"repo_url": "..."}\'.',
)
@click.option("--queue", default=None, help="Queue [the task's, else default].")
@click.option("--priority", type=int, default=None, help="Higher runs first [0].")
@click.option(
    "--delay",
    type=click.FloatRange(min=0),
    default=None,
    metavar="S",
    help="Seconds before the job may run [0].",
)
@click.option(
    "--max-retries",
    type=click.IntRange(min=0),
    default=None,
    metavar="N",
    help="Retries after the first attempt [3].",
)
def enqueue_command(
    task: str,
    url: str | None,
    args_text: str | None,
    queue: str | None,
    priority: int | None,
    delay: float | None,
    max_retries: int | None,
) -> None:
    """Queue one job of TASK; prints the new job's id."""
    args = parse_args_json(args_text)
    app = App(resolve_url(url))
    try:
        job_id = app.enqueue(
            task, args, queue=queue, priority=priority, delay=delay, max_retries=max_retries
        )
    finally:
        app.close()
    click.echo(job_id)


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
    store = store_for(url)
    jobs = store.list_jobs(status=status, queue=queue, limit=limit)
    if as_json:
        print_json(jobs)
        return
    now = store.clock()
    console = render.make_console()
    if not jobs:
        what = " ".join(x for x in (status, f"in queue {queue!r}" if queue else None) if x)
        console.print(f"no {what + ' ' if what else ''}jobs")
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
            render.fmt_seconds(render.age(job.get("created_at"), now)),
        ]
        if not one_queue:
            cells.insert(2, Text(job["queue"]))
        t.add_row(*cells)
    render.fit(t, width, shrink=("TASK", "QUEUE"))
    return t


def dead_jobs_view(jobs: list[dict[str, Any]], now: float) -> Group:
    """Each dead job: its id, task and queue, then when and why it died (indented)."""
    parts: list[Any] = []
    for job in jobs:
        head = Text(job["id"], style="bold")
        head.append(f"  {job['task']}  queue {job['queue']}")
        died = render.fmt_seconds(render.age(job.get("finished_at"), now))
        why = Text(
            f"died {died} ago after {job['attempts']} of {job['max_retries'] + 1} tries",
            style=render.STATUS_STYLES["dead"],
        )
        reason = render.last_line(job.get("dead_reason") or job.get("error"), 500)
        if reason:
            why.append(f": {reason}", style="")
        parts.append(head)
        parts.append(Padding(why, (0, 0, 0, 4)))
    return Group(*parts)


def _tries(job: dict[str, Any]) -> str:
    return f"{job['attempts']}/{job['max_retries'] + 1}"


@jobs_group.command("show")
@click.argument("job_id", metavar="ID")
@url_option
@json_option
def show_command(job_id: str, url: str | None, as_json: bool) -> None:
    """One job: its state, arguments, result or error, and the timeline of its attempts."""
    store = store_for(url)
    job = store.get_job(job_id)
    if as_json:
        print_json(job)
        return
    console = render.make_console()
    console.print(job_view(job, store.clock()))
    for line in last_error(job):
        console.print(line, soft_wrap=True)


def job_view(job: dict[str, Any], now: float) -> Group:
    status = render.status_text(job["status"])
    if job.get("cancel_requested") and job["status"] == JobStatus.RUNNING:
        status.append(" (cancel requested)", style="yellow")
    rows: list[tuple[str, str | Text]] = [
        ("id", job["id"]),
        ("task", job["task"]),
        ("queue", job["queue"]),
        ("status", status),
        (
            "attempts",
            f"{job['attempts']} of at most {job['max_retries'] + 1}"
            f" (max_retries {job['max_retries']})",
        ),
        ("priority", str(job["priority"])),
        ("created", _when(job.get("created_at"), now)),
    ]
    if job["status"] == JobStatus.QUEUED:
        rows.append(("runs at", _when(job.get("run_at"), now)))
    if job.get("started_at"):
        rows.append(("started", _when(job["started_at"], now)))
    if job.get("finished_at"):
        rows.append(("finished", _when(job["finished_at"], now)))
    if job["status"] == JobStatus.RUNNING:
        rows.append(("worker", f"{job.get('worker_id')} (execution {job.get('execution_id')})"))
        rows.append(("lease expires", _when(job.get("lease_expires_at"), now)))
        rows.append(("heartbeat", _when(job.get("heartbeat_at"), now)))
    progress = _progress(job.get("progress") or {})
    if progress:
        rows.append(("progress", progress))
    rows.append(("args", render.compact_json(job.get("args"), 2000)))
    if job.get("checkpoint") is not None:
        rows.append(("checkpoint", render.compact_json(job["checkpoint"], 2000)))
    if job.get("result") is not None:
        rows.append(("result", render.compact_json(job["result"], 2000)))
    if job.get("dead_reason"):
        rows.append(("dead reason", Text(job["dead_reason"], style="red")))
    parts: list[Any] = [render.key_values(rows), Text()]
    parts.extend(timeline(job.get("executions") or [], now))
    return Group(*parts)


def last_error(job: dict[str, Any]) -> list[Text]:
    """The job's last error (a traceback), its last lines, printed unwrapped."""
    error = job.get("error")
    if not error or job["status"] == JobStatus.SUCCEEDED:
        return []
    lines = error.rstrip().splitlines()
    out = [Text(), Text("last error", style="bold")]
    if len(lines) > ERROR_LINES:
        out.append(Text(f"  ... {len(lines) - ERROR_LINES} lines above (--json)", "dim"))
        lines = lines[-ERROR_LINES:]
    out.extend(Text("  " + line) for line in lines)
    return out


def _when(value: str | None, now: float) -> str:
    if not value:
        return "-"
    return f"{render.fmt_time(value)} ({render.fmt_ago(value, now)})"


def _progress(progress: dict[str, Any]) -> str:
    bits = []
    value = progress.get("value")
    if value is not None:
        bits.append(f"{value * 100:.0f}%" if 0 <= value <= 1 else f"{value:g}")
    if progress.get("stage"):
        bits.append(f"stage {progress['stage']}")
    if progress.get("message"):
        bits.append(str(progress["message"]))
    return ", ".join(bits)


CRASH_KEYS = (
    ("detected_by", "detected by"),
    ("detected_at", "detected at"),
    ("worker_id", "worker"),
    ("last_heartbeat_at", "last worker heartbeat"),
    ("job_heartbeat_at", "last job heartbeat"),
    ("lease_expires_at", "lease until"),
    ("signal", "signal"),
    ("exit_code", "exit code"),
    ("pid", "pid"),
)


def timeline(executions: list[dict[str, Any]], now: float) -> list[Text]:
    """Each attempt, oldest first: outcome, when, how long, where, and why it ended."""
    if not executions:
        return [Text("timeline: no attempt yet", style="bold")]
    header = Text(
        f"timeline ({len(executions)} execution{'s' * (len(executions) != 1)}, oldest first)",
        style="bold",
    )
    out = [header]
    for ex in executions:
        outcome = ex.get("outcome") or "running"
        started = render.epoch_of(ex.get("started_at"))
        ended = render.epoch_of(ex.get("ended_at"))
        start_text = render.fmt_time(ex.get("started_at"))
        if started is not None and ended is not None:
            end_text = render.fmt_time(ex.get("ended_at"))
            if end_text[:10] == start_text[:10]:
                end_text = end_text[11:]  # the same day: the time is enough
            when = f"{start_text} -> {end_text}  ({render.fmt_seconds(ended - started)})"
        elif started is not None:
            when = f"{start_text}, running for {render.fmt_seconds(now - started)}"
        else:
            when = start_text
        line = Text(f"  #{ex.get('execution_id')}  ")
        line.append(f"{outcome:<9}", style=render.STATUS_STYLES.get(outcome, "cyan"))
        line.append(f"  {when}")
        out.append(line)
        out.append(Text(f"      worker {ex.get('worker_id') or '-'}", style="dim"))
        crash = ex.get("crash")
        if ex.get("error") and not crash:
            out.append(Text(f"      error: {render.last_line(ex['error'])}"))
        if crash:
            out.append(
                Text(f"      crash: {crash.get('reason') or ex.get('error') or '-'}", style="red")
            )
            for key, label in CRASH_KEYS:
                value = crash.get(key)
                if value is None or (key == "worker_id" and value == ex.get("worker_id")):
                    continue
                if key.endswith("_at"):
                    value = render.fmt_time(str(value))
                out.append(Text(f"        {label}: {value}"))
            known = {k for k, _ in CRASH_KEYS} | {"reason"}
            for key, value in crash.items():
                if key not in known and value is not None:
                    out.append(Text(f"        {key.replace('_', ' ')}: {value}"))
    return out


@jobs_group.command("cancel")
@click.argument("job_id", metavar="ID")
@url_option
@json_option
def cancel_command(job_id: str, url: str | None, as_json: bool) -> None:
    """Cancel a queued job, or ask a running job's worker to stop it."""
    store = store_for(url)
    result = store.cancel_job(job_id)
    status = store.get_job(job_id)["status"]
    if as_json:
        print_json({"id": job_id, "result": result.value, "status": status})
        return
    if result is CancelResult.CANCELLED:
        click.echo(f"cancelled job {job_id} (it was queued: it will not run)")
    elif result is CancelResult.CANCEL_REQUESTED:
        click.echo(f"cancel requested for job {job_id}: its worker stops it at its next heartbeat")
    else:
        click.echo(f"job {job_id} already finished ({status}): nothing to cancel")
