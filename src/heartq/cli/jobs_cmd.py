"""`heartq enqueue` and `heartq jobs list|show|cancel`."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import Any

import click
from rich.console import Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from heartq import display, events, ids, policy
from heartq.app import App
from heartq.cli import render
from heartq.cli.common import json_option, limit_option, print_json, store_for, url_option
from heartq.config import resolve_url
from heartq.errors import ConfigError
from heartq.fleet import GONE_HINT
from heartq.model import JOB_STATUSES, CancelResult, JobStatus
from heartq.store.interface import Registry

DEFAULT_LIMIT = 100
"""`jobs list` and `dlq list` show the 100 newest jobs unless told otherwise."""
ERROR_LINES = 20
"""`jobs show` prints at most the last 20 lines of the last error (`--json` has it all)."""


def status_choice() -> click.Choice[str]:
    return click.Choice(JOB_STATUSES)


def read_args_text(value: str | None) -> str | None:
    """`--args` as typed: JSON itself, `@PATH` (a file's content) or `-` (stdin). A file
    or stdin carries what a command line cannot (a 2 MB value is over the kernel's
    limit for one argument: "Argument list too long")."""
    if value is None or (value != "-" and not value.startswith("@")):
        return value
    if value == "-":
        return sys.stdin.read()
    path = value[1:]
    if not path:
        raise ConfigError("--args @PATH needs a file name after the @, e.g. --args @args.json")
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise ConfigError(f"--args {value}: cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"--args {value}: {path} is not UTF-8 text ({exc.reason})") from None


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
    metavar="JSON|@FILE|-",
    default=None,
    help='Keyword arguments as a JSON object, e.g. \'{"repo_url": "..."}\'; '
    "@FILE reads it from a file, - from stdin.",
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
    "--eta",
    type=click.DateTime(["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%d %H:%M:%S%z", "%Y-%m-%dT%H:%M%z"]),
    default=None,
    metavar="TIME",
    help="When the job may first run, with its UTC offset: 2026-12-01T09:00:00+01:00.",
)
@click.option(
    "--max-retries",
    type=click.IntRange(min=0),
    default=None,
    metavar="N",
    help="Retries after the first attempt [the task's, else 3].",
)
@click.option(
    "--unique-key",
    default=None,
    metavar="KEY",
    help="While a job with this key is queued or running, print its id and store nothing.",
)
@click.option(
    "--unique-for",
    type=click.FloatRange(min=0),
    default=None,
    metavar="S",
    help="With --unique-key: a job with the key that finished within S seconds counts too.",
)
@click.option(
    "--concurrency-key",
    default=None,
    metavar="KEY",
    help="With --concurrency-limit: at most that many jobs with this key run at once.",
)
@click.option(
    "--concurrency-limit",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="How many jobs with --concurrency-key may run at once, across all workers.",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Refuse a task no worker has declared yet, instead of queueing it with the defaults.",
)
@click.option("--json", "as_json", is_flag=True, help='Print {"id": ...} as JSON.')
def enqueue_command(
    task: str,
    url: str | None,
    args_text: str | None,
    queue: str | None,
    priority: int | None,
    delay: float | None,
    eta: datetime | None,
    max_retries: int | None,
    unique_key: str | None,
    unique_for: float | None,
    concurrency_key: str | None,
    concurrency_limit: int | None,
    strict: bool,
    as_json: bool,
) -> None:
    """Queue one job of TASK; prints the new job's id.

    The job takes the options its task's workers declared (queue, priority, retries,
    backoff) unless given here. A task no worker has declared yet is queued with the
    defaults, with a warning; its job moves to the task's queue and policy as soon as a
    worker declares it (--strict refuses it instead). With --unique-key, a job with that
    key still queued or running (or finished within --unique-for) is answered instead."""
    args = parse_args_json(read_args_text(args_text))
    app = App(resolve_url(url), strict_tasks=strict)
    warnings: list[dict[str, Any]] = []

    def hear(event: str, fields: dict[str, Any]) -> None:
        if event == events.TASK_NOT_DECLARED:
            warnings.append(fields)

    events.add_listener(hear)
    try:
        job_id = app.enqueue(
            task,
            args,
            queue=queue,
            priority=priority,
            delay=delay,
            eta=eta,
            max_retries=max_retries,
            unique_key=unique_key,
            unique_for=unique_for,
            concurrency_key=concurrency_key,
            concurrency_limit=concurrency_limit,
        )
    finally:
        events.remove_listener(hear)
        app.close()
    for fields in warnings:
        click.echo(not_declared_warning(fields), err=True)
    if as_json:
        print_json({"id": job_id})
    else:
        click.echo(job_id)


def not_declared_warning(fields: dict[str, Any]) -> str:
    return (
        f"heartq: warning: task {fields['task']!r} is not declared yet (no worker has "
        f"started with it): queue {fields['queue']!r}, max_retries {fields['max_retries']}, "
        f"backoff {display.fmt_seconds(fields['retry_backoff'])} hold until a worker declares "
        "it; then the job takes the task's queue and policy (--strict refuses instead)"
    )


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
    store = store_for(url, existing=True)
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
            display.fmt_seconds(display.age(job.get("created_at"), now)),
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


def _tries(job: dict[str, Any]) -> str:
    return f"{job['attempts']}/{job['max_retries'] + 1}"


@jobs_group.command("show")
@click.argument("job_id", metavar="ID")
@url_option
@json_option
def show_command(job_id: str, url: str | None, as_json: bool) -> None:
    """One job: its state, arguments, result or error, and the timeline of its attempts."""
    store = store_for(url, existing=True)
    job = with_worker_liveness(store, store.get_job(store.resolve_job_id(job_id)))
    job["executions"] = [dict(ex, **execution_timing(ex)) for ex in job["executions"]]
    if as_json:
        print_json(job)
        return
    console = render.make_console()
    console.print(job_view(job, store.clock()))
    for line in last_error(job):
        console.print(line, soft_wrap=True)


def with_worker_liveness(store: Registry, job: dict[str, Any]) -> dict[str, Any]:
    """The job plus `worker_gone`: for a running job, whether its worker's liveness lock
    is free (the process died; the job is running only until a reaper reclaims it);
    null for a job that is not running. Read only."""
    gone = None
    if job["status"] == JobStatus.RUNNING and job.get("worker_id"):
        gone = bool(store.liveness_free([job["worker_id"]]))
    return dict(job, worker_gone=gone)


def job_view(job: dict[str, Any], now: float) -> Group:
    status = render.status_text(job["status"])
    if job.get("cancel_requested") and job["status"] == JobStatus.RUNNING:
        status.append(" (cancel requested)", style="yellow")
    if job.get("worker_gone"):
        status.append(f" (worker gone: {GONE_HINT})", style=render.STATUS_STYLES["gone"])
    rows: list[tuple[str, str | Text]] = [
        ("id", job["id"]),
        ("task", job["task"]),
        ("status", status),
        ("attempts", f"{job['attempts']} of at most {job['max_retries'] + 1}"),
        *policy_rows(job),
        ("created", _when(job.get("created_at"), now)),
    ]
    if job.get("unique_key") is not None:
        rows.append(("unique key", job["unique_key"]))
    if job.get("concurrency_key") is not None:
        limit = job.get("concurrency_limit")
        rows.append(("concurrency", f"key {job['concurrency_key']!r}, at most {limit} at once"))
    if job.get("schedule") is not None:
        rows.append(("schedule", f"a tick of the periodic schedule {job['schedule']!r}"))
    if job["status"] == JobStatus.QUEUED:
        rows.append(("runs at", _when(job.get("run_at"), now)))
    if job.get("started_at"):
        rows.append(("started", _when(job["started_at"], now)))
    if job.get("finished_at"):
        rows.append(("finished", _when(job["finished_at"], now)))
    if job["status"] == JobStatus.RUNNING:
        worker = f"{job.get('worker_id')} (execution {job.get('execution_id')})"
        rows.append(("worker", worker + (", gone" if job.get("worker_gone") else "")))
        rows.append(("lease expires", _when(job.get("lease_expires_at"), now)))
        rows.append(("heartbeat", _when(job.get("heartbeat_at"), now)))
    progress = _progress(job.get("progress") or {})
    if progress:
        rows.append(("progress", progress))
    rows.append(("args", display.compact_json(job.get("args"), 2000)))
    if job.get("checkpoint") is not None:
        rows.append(("checkpoint", display.compact_json(job["checkpoint"], 2000)))
    if job.get("result") is not None:
        rows.append(("result", display.compact_json(job["result"], 2000)))
    if job.get("dead_reason"):
        rows.append(("dead reason", Text(job["dead_reason"], style="red")))
    if job["status"] == JobStatus.CANCELLED:
        ran = bool(job.get("executions"))
        who = job.get("cancelled_by") or CANCELLED_BY
        rows.append(("cancelled", f"by {who}, {'while running' if ran else 'before it ran'}"))
    parts: list[Any] = [render.key_values(rows), Text()]
    parts.extend(timeline(job.get("executions") or [], now))
    return Group(*parts)


SOURCE_LABELS = {
    policy.CALLER: "chosen at enqueue",
    policy.TASK: "task",
    policy.DEFAULTS: "default: task not declared yet",
}


def policy_rows(job: dict[str, Any]) -> list[tuple[str, str | Text]]:
    """The policy in force (queue, priority, retries, backoff, timeouts), each part with
    where it comes from: the caller, the task's declaration, or the defaults."""
    parts = job.get("policy")
    if parts is None:  # `jobs list --json` rows carry no policy
        return [("queue", job["queue"]), ("priority", str(job["priority"]))]

    def row(label: str, name: str, text: str) -> tuple[str, str | Text]:
        line = Text(text)
        line.append(f"  ({SOURCE_LABELS.get(parts[name]['from'], parts[name]['from'])})", "dim")
        return (label, line)

    def seconds(value: float | None) -> str:
        return "none" if value is None else display.fmt_seconds(value)

    backoff = (
        f"{seconds(parts['retry_backoff']['value'])}, doubling up to "
        f"{seconds(parts['retry_backoff_max']['value'])}"
    )
    return [
        row("queue", "queue", str(parts["queue"]["value"])),
        row("priority", "priority", str(parts["priority"]["value"])),
        row("max retries", "max_retries", str(parts["max_retries"]["value"])),
        row("retry backoff", "retry_backoff", backoff),
        row("timeout", "timeout", seconds(parts["timeout"]["value"])),
        row("heartbeat timeout", "heartbeat_timeout", seconds(parts["heartbeat_timeout"]["value"])),
    ]


CANCELLED_BY = "a cancel request (`heartq jobs cancel ID` or `app.cancel(ID)`)"
"""Who stopped a job when the database does not say (a cancel from before schema v5):
a cancel is only ever asked for by an operator or the app's code."""


def last_error(job: dict[str, Any]) -> list[Text]:
    """The job's last error (a traceback), its last lines, printed unwrapped. A cancelled
    job has none to show: the traceback of the `Cancelled` heartq raised in its code to
    stop it says nothing the `cancelled` line does not (`--json` keeps it)."""
    error = job.get("error")
    if not error or job["status"] in (JobStatus.SUCCEEDED, JobStatus.CANCELLED):
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
    return f"{display.fmt_time(value)} ({display.fmt_ago(value, now)})"


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


def last_sign_of_life(ex: dict[str, Any]) -> tuple[float, str] | None:
    """For a crashed attempt whose death was detected later (not a child's exit, seen at
    once): the latest heartbeat of its job or its worker before it was found dead, as
    (epoch, ISO text); None when there is nothing to go by."""
    crash = ex.get("crash") or {}
    if ex.get("outcome") != "crashed" or crash.get("detected_by") == "child_exit":
        return None
    started, ended = display.epoch_of(ex.get("started_at")), display.epoch_of(ex.get("ended_at"))
    if started is None or ended is None:
        return None
    signs = []
    for key in ("job_heartbeat_at", "last_heartbeat_at"):
        moment = display.epoch_of(crash.get(key))
        if moment is not None and moment <= ended:
            signs.append(
                (max(moment, started), crash[key] if moment >= started else ex["started_at"])
            )
    return max(signs) if signs else None


def execution_timing(ex: dict[str, Any]) -> dict[str, float | None]:
    """`duration` (seconds the attempt ran: to its end, or to its last sign of life for a
    crash detected later) and `detection_delay` (seconds from there to its detection)."""
    started, ended = display.epoch_of(ex.get("started_at")), display.epoch_of(ex.get("ended_at"))
    if started is None or ended is None:
        return {"duration": None, "detection_delay": None}
    last_alive = last_sign_of_life(ex)
    if last_alive is None:
        return {"duration": round(ended - started, 3), "detection_delay": None}
    return {
        "duration": round(last_alive[0] - started, 3),
        "detection_delay": round(ended - last_alive[0], 3),
    }


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
        started = display.epoch_of(ex.get("started_at"))
        ended = display.epoch_of(ex.get("ended_at"))
        start_text = display.fmt_time(ex.get("started_at"))
        last_alive = last_sign_of_life(ex)
        if started is not None and ended is not None and last_alive is not None:
            # A crash is seen after the fact: the attempt ran until its last sign of
            # life; the time until someone noticed is the detection delay, not work.
            end_text = display.fmt_time(last_alive[1])
            if end_text[:10] == start_text[:10]:
                end_text = end_text[11:]
            when = (
                f"{start_text} -> {end_text}  ({display.fmt_seconds(last_alive[0] - started)}, "
                f"then silent; detected {display.fmt_seconds(ended - last_alive[0])} later)"
            )
        elif started is not None and ended is not None:
            end_text = display.fmt_time(ex.get("ended_at"))
            if end_text[:10] == start_text[:10]:
                end_text = end_text[11:]  # the same day: the time is enough
            when = f"{start_text} -> {end_text}  ({display.fmt_seconds(ended - started)})"
        elif started is not None:
            when = f"{start_text}, running for {display.fmt_seconds(now - started)}"
        else:
            when = start_text
        line = Text(f"  #{ex.get('execution_id')}  ")
        line.append(f"{outcome:<9}", style=render.STATUS_STYLES.get(outcome, "cyan"))
        line.append(f"  {when}")
        out.append(line)
        out.append(Text(f"      worker {ex.get('worker_id') or '-'}", style="dim"))
        crash = ex.get("crash")
        if outcome == "cancelled":
            out.append(Text(f"      stopped by {CANCELLED_BY}"))
        elif ex.get("error") and not crash:
            out.append(Text(f"      error: {display.last_line(ex['error'])}"))
        if crash:
            out.append(
                Text(f"      crash: {crash.get('reason') or ex.get('error') or '-'}", style="red")
            )
            for key, label in CRASH_KEYS:
                value = crash.get(key)
                if value is None or (key == "worker_id" and value == ex.get("worker_id")):
                    continue
                if key.endswith("_at"):
                    value = display.fmt_time(str(value))
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
    store = store_for(url, existing=True)
    job_id = store.resolve_job_id(job_id)
    result = store.cancel_job(job_id, by=ids.requester("heartq jobs cancel"))
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
