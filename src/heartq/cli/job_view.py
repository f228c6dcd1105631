"""One job as `heartq jobs show` and `heartq jobs watch` draw it: its fields, the policy
in force and where each part comes from, the timeline of its attempts, its last error.
Presentation only: the figures (liveness, timings) come from `heartq.inspect`."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Group
from rich.text import Text

from heartq import display, policy
from heartq.cli import render
from heartq.inspect.attempts import attempt_timing, shown_outcome
from heartq.inspect.fleet import GONE_HINT
from heartq.inspect.states import CLAIMED, HELD
from heartq.lifecycle.fate import EXPIRED_PREFIX
from heartq.lifecycle.retry import CONSTANT, EXPONENTIAL, LINEAR, Backoff
from heartq.model import JobStatus

ERROR_LINES = 20
"""`jobs show` prints at most the last 20 lines of the last error (`--json` has it all)."""


def job_view(job: dict[str, Any], now: float) -> Group:
    status = render.status_text(job["status"])
    if job.get("cancel_requested") and job["status"] in HELD:
        status.append(" (cancel requested)", style="yellow")
    if job.get("worker_gone"):
        status.append(f" (worker gone: {GONE_HINT})", style=render.STATUS_STYLES["gone"])
    rows: list[tuple[str, str | Text]] = [
        ("id", job["id"]),
        ("task", job["task"]),
        ("status", status),
        ("attempts", f"{job['attempts']} of at most {job['max_retries'] + 1}"),
        *snooze_rows(job),
        *policy_rows(job),
        ("created", _when(job.get("created_at"), now)),
    ]
    if job.get("unique_key") is not None:
        rows.append(("unique key", job["unique_key"]))
    if job.get("concurrency_key") is not None:
        limit = job.get("concurrency_limit")
        rows.append(("concurrency", f"key {job['concurrency_key']!r}, at most {limit} at once"))
    if job.get("fair_key") is not None:
        rows.append(("fair share", f"key {job['fair_key']!r}, weight {job['fair_weight']:g}"))
    if job.get("rate_key") is not None:
        rows.append(("rate limit", f"key {job['rate_key']!r}, at most {job['rate_limit']} starts"))
    if job.get("meta"):
        rows.append(("meta", json.dumps(job["meta"], ensure_ascii=False, sort_keys=True)))
    if job.get("schedule") is not None:
        rows.append(("schedule", f"a tick of the periodic schedule {job['schedule']!r}"))
    rows.extend(dependency_rows(job))
    if job["status"] == JobStatus.QUEUED:
        rows.append(("runs at", _when(job.get("run_at"), now)))
    ahead = job["status"] == CLAIMED  # in its worker's buffer (--prefetch), not started
    if ahead:
        rows.append(("claimed", _when(job.get("started_at"), now)))
        rows.append(("started", "not yet: claimed ahead, waiting for a free slot"))
    elif job.get("started_at"):
        rows.append(("started", _when(job["started_at"], now)))
    if job.get("finished_at"):
        rows.append(("finished", _when(job["finished_at"], now)))
    if job["status"] in HELD:
        worker = f"{job.get('worker_id')} (execution {job.get('execution_id')})"
        if ahead:
            worker = f"claimed ahead by {worker}"
        rows.append(("worker", worker + (", gone" if job.get("worker_gone") else "")))
        rows.append(("lease expires", _when(job.get("lease_expires_at"), now)))
        rows.append(("heartbeat", _when(job.get("heartbeat_at"), now)))
    progress = _progress(job.get("progress") or {})
    if progress:
        rows.append(("progress", progress))
    expired = str(job.get("error") or "").startswith(EXPIRED_PREFIX)
    if job.get("expires_at") and not expired:
        rows.append(("expires", _when(job["expires_at"], now)))
    rows.append(("args", display.compact_json(job.get("args"), 2000)))
    if job.get("checkpoint") is not None:
        rows.append(("checkpoint", display.compact_json(job["checkpoint"], 2000)))
    if job.get("result") is not None:
        rows.append(("result", display.compact_json(job["result"], 2000)))
    if job.get("result_lost"):  # succeeded, its result lost after its transaction's commit
        rows.append(("result", Text(f"lost: {job['result_lost']}", style="yellow")))
    if job.get("dead_reason"):
        rows.append(("dead reason", Text(job["dead_reason"], style="red")))
    if job["status"] == JobStatus.CANCELLED and expired:
        when = job.get("expires_at")
        rows.append(("cancelled", Text(f"expired: not started by {when}, never run", "yellow")))
    elif job["status"] == JobStatus.CANCELLED:
        ran = bool(job.get("executions"))
        failed = str(job.get("error") or "")
        who = job.get("cancelled_by") or (
            failed if failed.startswith(DEPENDENCY_FAILED) else CANCELLED_BY
        )
        rows.append(("cancelled", f"by {who}, {'while running' if ran else 'before it ran'}"))
    parts: list[Any] = [render.key_values(rows), Text()]
    parts.extend(timeline(job.get("executions") or [], now))
    return Group(*parts)


LINKS_SHOWN = 10
"""`jobs show` names at most 10 of a job's dependencies or dependents (`--json`: all of
them, up to 1,000 dependents)."""


IF_ONE_FAILS = {
    "block": "blocked until it is replayed (on_dependency_failure=block)",
    "cancel": "cancelled (on_dependency_failure=cancel)",
    "run": "runs anyway (on_dependency_failure=run)",
}
"""What a dependency that ends dead does to a job, by its `on_dependency_failure`."""


def dependency_rows(job: dict[str, Any]) -> list[tuple[str, str | Text]]:
    """What a job waits for (`waiting`: the dependencies not ended yet), the dead job
    that blocks it (`blocked`), what it depends on and what depends on it, each with its
    status; what a failed dependency does to it, and whether it takes their results."""
    rows: list[tuple[str, str | Text]] = []
    depends_on = job.get("depends_on") or []
    pending = [d for d in depends_on if d.get("ended") is None]
    if job["status"] in (JobStatus.WAITING, JobStatus.BLOCKED) and pending:
        rows.append(("waits for", _links(pending, f"{len(pending)} of {len(depends_on)}: ")))
    holder = job.get("blocked_by")
    if holder:
        text = _links([dict(holder, status=JobStatus.DEAD.value)], "")
        text.append(f": {display.last_line(holder.get('error') or holder.get('dead_reason'))}")
        rows.append(("blocked by", text))
        rows.append(("release", f"heartq dlq replay {holder['id']}"))
    if depends_on:
        rows.append(("depends on", _links(depends_on, "")))
        failure = IF_ONE_FAILS.get(job.get("on_dependency_failure") or "")
        if failure:
            rows.append(("if one fails", failure))
        if job.get("dependency_results"):
            rows.append(("results", "its dependencies' results, in order, are its first argument"))
    dependents = job.get("dependents") or []
    if dependents:
        rows.append(("dependents", _links(dependents, "")))
    return rows


def _links(jobs: list[dict[str, Any]], lead: str) -> Text:
    """`id (task, status), ...`: at most `LINKS_SHOWN` of them, each status in its color
    (`gone` for a job pruned since)."""
    text = Text(lead)
    for i, linked in enumerate(jobs[:LINKS_SHOWN]):
        if i:
            text.append(", ")
        status = linked.get("status") or "gone"
        text.append(f"{linked['id']} ({linked.get('task') or '?'}, ")
        text.append(status, style=render.STATUS_STYLES.get(status, ""))
        text.append(")")
    if len(jobs) > LINKS_SHOWN:
        text.append(f", and {len(jobs) - LINKS_SHOWN} more (--json)", style="dim")
    return text


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

    stated = parts.get("retry_intervals", {}).get("value") or parts.get("retry_delay", {}).get(
        "value"
    )  # the task's own words decide, whatever the caller chose of the base and cap
    return [
        row("queue", "queue", str(parts["queue"]["value"])),
        row("priority", "priority", str(parts["priority"]["value"])),
        row("max retries", "max_retries", str(parts["max_retries"]["value"])),
        row(
            "retry backoff",
            "retry_intervals" if stated else "retry_backoff",
            backoff_text(job, parts),
        ),
        row("timeout", "timeout", seconds(parts["timeout"]["value"])),
        row("heartbeat timeout", "heartbeat_timeout", seconds(parts["heartbeat_timeout"]["value"])),
    ]


def backoff_text(job: dict[str, Any], parts: dict[str, Any]) -> str:
    """The wait before a retry as the worker will decide it: the task's `retry_delay`
    function first (its answer unknown here), else its `retry_intervals`, else the job's
    base and cap by the task's schedule; for a job that may still be retried, the wait
    if its next attempt to end fails (`about` with jitter), or that none is left."""
    value: dict[str, Any] = {
        name: (part or {}).get("value") for name, part in parts.items() if name != "declared"
    }
    intervals = value.get("retry_intervals")
    backoff = Backoff(
        value.get("retry_schedule") or EXPONENTIAL,
        bool(value.get("retry_jitter", True)),
        None if not intervals else tuple(intervals),
    )
    base, cap = float(value["retry_backoff"]), float(value["retry_backoff_max"])
    if backoff.intervals:
        waits = ", ".join(display.fmt_seconds(wait) for wait in backoff.intervals)
        repeated = ", the last repeated" if len(backoff.intervals) > 1 else ", each time"
        shape = f"retry_intervals {waits}{repeated}"
    elif backoff.schedule == CONSTANT:
        shape = f"{display.fmt_seconds(base)} each time"
    elif backoff.schedule == LINEAR:
        shape = f"{display.fmt_seconds(base)} more each time, up to {display.fmt_seconds(cap)}"
    else:
        shape = f"{display.fmt_seconds(base)}, doubling up to {display.fmt_seconds(cap)}"
    if job["status"] in FINISHED:
        if value.get("retry_delay"):
            return f"by the task's retry_delay function; when it answers None, {shape}"
        return shape
    attempt = job["attempts"] if job["status"] in HELD else job["attempts"] + 1
    if attempt > job["max_retries"]:
        return f"{shape}; none after attempt {attempt}: no retry left"
    wait = backoff.raw(attempt, base)
    wait = wait if backoff.intervals else min(wait, cap)
    about = "about " if backoff.jitter else ""
    then = f"{about}{display.fmt_seconds(wait)}"
    if value.get("retry_delay"):
        return (
            f"by the task's retry_delay function if attempt {attempt} fails; when it "
            f"answers None, {then} ({shape})"
        )
    if backoff.intervals:
        return f"{then} if attempt {attempt} fails ({shape})"
    return f"{shape}: {then} if attempt {attempt} fails"


FINISHED = frozenset(
    status.value
    for status in (JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED, JobStatus.BLOCKED)
)
"""The statuses of a job that is retried no more (a replay starts it again)."""


DEPENDENCY_FAILED = "dependency_failed:"
"""How the error of a job cancelled by a dependency's failure starts (store/sql/
dependencies.py): `dependency_failed: job ID ended dead`."""

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


def snooze_rows(job: dict[str, Any]) -> list[tuple[str, str | Text]]:
    """How many times the job snoozed (`heartq.Snooze`), if it did: none of those within
    its task's `max_snoozes` is counted in its attempts."""
    snoozes = job.get("snoozes") or 0
    if not snoozes:
        return []
    return [("snoozes", f"{snoozes}, not counted as attempts")]


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
        outcome = shown_outcome(ex)
        start_text = display.fmt_time(ex.get("started_at"))
        timing = attempt_timing(ex)
        running_for = timing.running_for(now)
        if timing.last_alive_at is not None:
            # A crash is seen after the fact: the attempt ran until its last sign of
            # life; the time until someone noticed is the detection delay, not work.
            end_text = display.fmt_time(timing.last_alive_at)
            if end_text[:10] == start_text[:10]:
                end_text = end_text[11:]
            when = (
                f"{start_text} -> {end_text}  ({display.fmt_seconds(timing.duration)}, "
                f"then silent; detected {display.fmt_seconds(timing.detection_delay)} later)"
            )
        elif timing.duration is not None:
            end_text = display.fmt_time(ex.get("ended_at"))
            if end_text[:10] == start_text[:10]:
                end_text = end_text[11:]  # the same day: the time is enough
            when = f"{start_text} -> {end_text}  ({display.fmt_seconds(timing.duration)})"
        elif running_for is not None:
            when = f"{start_text}, running for {display.fmt_seconds(running_for)}"
        elif ex.get("claimed_ahead"):
            when = f"{start_text}, claimed ahead, not started"
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
        elif outcome == "snoozed":  # what its task said: not an error
            out.append(Text(f"      {display.last_line(ex.get('error') or 'snoozed')}"))
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
