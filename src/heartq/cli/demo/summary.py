"""The demo's summary: every job read back through the `Store` API, and what happened to
the jobs of the killed worker (where it was, who found it, how fast, who finished it)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from heartq import display
from heartq.cli.demo.model import DETECTED_BY_LABELS, Kill
from heartq.cli.demo.scenario import Scenario
from heartq.display import plural
from heartq.store import redact


@dataclass
class Summary:
    lines: list[str] = field(default_factory=list)
    ok: bool = False
    reason: str = ""  # why not ok, in one line


def summarize(scenario: Scenario, keep: bool) -> Summary:
    """Read every job back and say what happened; `ok` when every job succeeded and at
    least one was recovered from the killed worker."""
    jobs = {job_id: scenario.store.get_job(job_id) for job_id in scenario.job_ids}
    succeeded = [j for j in jobs.values() if j["status"] == "succeeded"]
    wall = (scenario.finished_at or time.monotonic()) - scenario.t0
    summary = Summary(["", "Summary"])
    summary.lines.append(
        f"  {len(succeeded)}/{len(jobs)} jobs succeeded in {wall:.1f} s "
        f"({len(scenario.workers)} workers x {scenario.settings.concurrency} slots)"
    )
    kill = scenario.kill
    recovered = [] if kill is None else crashed_on(kill, jobs.values())
    if kill is None:
        summary.lines.append("  no worker was killed")
    else:
        summary.lines += held_lines(scenario, kill, recovered)
        summary.lines += detection_lines(scenario, kill, recovered)
    ok_recovered = [job for job, _ in recovered if job["status"] == "succeeded"]
    summary.ok = len(succeeded) == len(jobs) and bool(ok_recovered)
    if summary.ok:
        assert kill is not None
        summary.lines.append(
            f"  result: all {len(jobs)} jobs succeeded; {len(ok_recovered)} recovered from "
            f"the killed worker {kill.worker.name}"
        )
    elif len(succeeded) != len(jobs):
        counts = ", ".join(f"{n} {s}" for s, n in scenario.status_counts().items())
        summary.reason = f"not every job succeeded ({counts})"
    else:
        summary.reason = (
            "no worker was killed"
            if kill is None
            else f"no job was recovered from the killed worker {kill.worker.name}"
        )
    if keep:
        summary.lines += kept_lines(scenario, recovered)
    return summary


def crashed_on(kill: Kill, jobs: Any) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """`(job, crash context)` of every job whose execution on the killed worker crashed."""
    found = []
    for job in jobs:
        for execution in job["executions"]:
            if execution["worker_id"] == kill.worker.worker_id and execution["outcome"] == (
                "crashed"
            ):
                found.append((job, execution.get("crash") or {}))
    return found


def detection_delay(kill: Kill, crash: dict[str, Any]) -> float | None:
    detected = display.epoch_of(crash.get("detected_at"))
    return None if detected is None else max(0.0, detected - kill.db_time)


def held_lines(
    scenario: Scenario, kill: Kill, recovered: list[tuple[dict[str, Any], dict[str, Any]]]
) -> list[str]:
    """One line per held job: where it was killed, who found it, how it ended."""
    lines = [
        f"  {kill.worker.name} (pid {kill.worker.proc.pid}) was killed with SIGKILL "
        f"at {kill.at - scenario.t0:.1f} s; {len(recovered)} of its jobs were reclaimed:"
    ]
    for job, crash in recovered:
        delay = detection_delay(kill, crash)
        final = job["executions"][-1]
        held = kill.held.get(job["id"])
        at = ""
        if held is not None and held.progress is not None:
            at = f" at {int(held.progress * 100)}%" + (f" ({held.stage})" if held.stage else "")
        result = job.get("result") or {}
        resumed = result.get("resumed_at_stage") if isinstance(result, dict) else None
        lines.append(
            f"    {job['id']}  killed{at}; detected by {crash.get('detected_by', '?')}"
            + (f" after {delay:.2f} s" if delay is not None else "")
            + f"; attempt {job['attempts']} on {scenario.name_of(final['worker_id'])} "
            f"{job['status']}" + (f", resumed at stage {resumed}" if resumed else "")
        )
    return lines


def detection_lines(
    scenario: Scenario, kill: Kill, recovered: list[tuple[dict[str, Any], dict[str, Any]]]
) -> list[str]:
    """How the held jobs were detected, how long after the kill, against leases alone."""
    by: dict[str, list[float]] = {}
    for _, crash in recovered:
        delay = detection_delay(kill, crash)
        if delay is not None:
            by.setdefault(str(crash.get("detected_by")), []).append(delay)
    if not by:
        return []
    parts = []
    for name, values in sorted(by.items()):
        span = (
            f"{min(values):.2f}-{max(values):.2f} s"
            if min(values) != max(values)
            else f"{values[0]:.2f} s"
        )
        label = DETECTED_BY_LABELS.get(name, name)
        parts.append(f"{label} for {plural(len(values), 'job')} ({span} after the kill)")
    s = scenario.settings
    return [
        "  detection: " + "; ".join(parts),
        f"  (leases alone would have taken up to {s.lease + s.reclaim_interval:g} s: "
        f"lease {s.lease:g} s + reclaim interval {s.reclaim_interval:g} s)",
    ]


def kept_lines(
    scenario: Scenario, recovered: list[tuple[dict[str, Any], dict[str, Any]]]
) -> list[str]:
    url = redact(scenario.url)
    lines = [
        f"  kept: {scenario.workdir} (worker logs: demo-worker-N.log)",
        f"  try: heartq workers --all --url {url}",
    ]
    if recovered:
        lines.append(f"       heartq jobs show {recovered[0][0]['id']} --url {url}")
    return lines
