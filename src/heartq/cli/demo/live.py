"""What the demo shows while it runs: a live view in a terminal, status lines otherwise.

The live view redraws at every tick: a header with the timings, the jobs (as many per row
as the width allows, with a progress bar and stage), the workers with their heartbeat
age, and the latest events. Status colours are those of every other command
(`render.STATUS_STYLES`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import click
from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from heartq.cli import render
from heartq.cli.demo.model import short_id
from heartq.cli.demo.scenario import Scenario

MIN_EVENT_LINES, MAX_EVENT_LINES = 4, 14
"""The live view shows the last 4 to 14 events, as many as the terminal has room for."""
WIDE_CELL, NARROW_CELL = 60, 39
"""Characters one job takes in the live view (with its stage, or without)."""
NARROW_LABELS = {"succeeded": "done", "cancelled": "cancel"}
STATUS_LINE_EVERY = 1.0
"""Seconds between two status lines without the live view."""


@dataclass(frozen=True)
class JobLayout:
    """How the live view shows the jobs: which, how many per row, how much of each."""

    jobs: list[str]
    groups: int
    rows: int
    wide: bool
    hidden: str  # "12 queued, 6 succeeded": the jobs left out, if any


class StatusLines:
    """Without a terminal: one line per event as it happens, and a status line a second."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self._last = 0.0

    def show(self) -> None:
        scenario = self.scenario
        if time.monotonic() - self._last >= STATUS_LINE_EVERY or scenario.finished_at:
            self._last = time.monotonic()
            click.echo(f"[{scenario.elapsed():5.1f}s] {self.status_line()}")

    def status_line(self) -> str:
        scenario = self.scenario
        counts = ", ".join(f"{n} {s}" for s, n in scenario.status_counts().items())
        workers = []
        for worker in scenario.workers:
            row = scenario.worker_rows.get(str(worker.worker_id))
            if row is None:
                continue
            age = scenario.heartbeat_age(row)
            state = "KILLED/" + row["status"] if worker.killed else row["status"]
            workers.append(f"{worker.name} {state} {row['running']} jobs hb {age:.1f}s")
        return f"jobs: {counts} | " + "; ".join(workers)


class LiveView:
    """The live view, redrawn in place at every tick."""

    def __init__(self, scenario: Scenario, console: Console) -> None:
        self.scenario = scenario
        self.console = console
        self.live = Live(console=console, auto_refresh=False, transient=False)

    def __enter__(self) -> LiveView:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.live.__exit__(*exc)

    def show(self) -> None:
        self.live.update(self.render(), refresh=True)

    def render(self) -> RenderableType:
        layout = self.job_layout()
        parts: list[RenderableType] = [self.header(), self.jobs_table(layout)]
        if layout.hidden:
            parts.append(Text(f"  + {layout.hidden}", "dim", no_wrap=True, overflow="ellipsis"))
        parts.append(self.workers_table())
        used = layout.rows + (1 if layout.hidden else 0) + self.fixed_lines() - MIN_EVENT_LINES
        room = max(MIN_EVENT_LINES, min(MAX_EVENT_LINES, self.console.height - used))
        parts.append(Text("events", "bold"))
        for event in self.scenario.events[-room:]:
            line = Text(no_wrap=True, overflow="ellipsis")
            line.append(f"[{event.at:5.1f}s] ", "dim")
            line.append(event.text, event.style)
            parts.append(line)
        return Group(*parts)

    def header(self) -> Text:
        scenario, s = self.scenario, self.scenario.settings
        header = Text(no_wrap=True, overflow="ellipsis")
        header.append("heartq demo", "bold")
        header.append(
            f"  {len(scenario.job_ids)} jobs, {len(scenario.workers)} workers x "
            f"{s.concurrency}  t={scenario.elapsed():.1f} s"
        )
        header.append(
            f"  (heartbeat {s.heartbeat_interval:g} s, lease {s.lease:g} s, "
            f"reclaim {s.reclaim_interval:g} s, liveness {s.liveness_interval:g} s)",
            "dim",
        )
        return header

    def fixed_lines(self) -> int:
        """Lines of the live view besides the job rows: header, the jobs' table head,
        the workers' table, the events' title and the fewest event lines."""
        return 1 + 2 + (2 + len(self.scenario.workers)) + 1 + MIN_EVENT_LINES

    def job_layout(self) -> JobLayout:
        """As many jobs per row as the width allows. All jobs with their stage if they fit
        the terminal; else narrower cells; else only the jobs worth watching (running, and
        the killed worker's) and a count of the rest."""
        width, height = self.console.width, self.console.height
        room = max(1, height - self.fixed_lines())
        everything = list(self.scenario.job_ids)
        watched = [j for j in everything if self.watched(j)]
        others = self.scenario.status_counts(exclude=set(watched))
        hidden = ", ".join(f"{n} {s}" for s, n in others.items())
        choices = [
            (everything, True, ""),
            (everything, False, ""),
            (watched, True, hidden),
            (watched, False, hidden),
        ]
        for jobs, wide, rest in choices:
            groups = max(1, width // (WIDE_CELL if wide else NARROW_CELL))
            rows = math.ceil(len(jobs) / groups)
            if rows + (1 if rest else 0) <= room:
                return JobLayout(jobs, groups, rows, wide, rest)
        most = max(1, width // NARROW_CELL)
        return JobLayout(watched, most, math.ceil(len(watched) / most), False, hidden)

    def watched(self, job_id: str) -> bool:
        job = self.scenario.jobs.get(job_id)
        kill = self.scenario.kill
        if job is None:
            return False
        return job["status"] == "running" or (kill is not None and job_id in kill.held)

    def jobs_table(self, layout: JobLayout) -> Table:
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1, 0, 0), pad_edge=False)
        for _ in range(layout.groups):
            table.add_column("job", no_wrap=True)
            table.add_column("status", no_wrap=True)
            table.add_column("wkr" if layout.wide else "w", no_wrap=True)
            table.add_column("#", justify="right", no_wrap=True)
            table.add_column("progress", no_wrap=True, overflow="crop")
        for r in range(layout.rows):
            cells: list[RenderableType] = []
            for g in range(layout.groups):
                index = g * layout.rows + r
                if index < len(layout.jobs):
                    cells.extend(self.job_cells(layout.jobs[index], layout.wide))
                else:
                    cells.extend(["", "", "", "", ""])
            table.add_row(*cells)
        return table

    def job_cells(self, job_id: str, wide: bool) -> list[RenderableType]:
        job = self.scenario.jobs.get(job_id)
        if job is None:
            return [short_id(job_id), "", "", "", ""]
        status, kill = job["status"], self.scenario.kill
        holder_gone = (
            kill is not None and job_id in kill.held and kill.held[job_id].crash is not None
        )
        label = status if wide else NARROW_LABELS.get(status, status)
        style = render.STATUS_STYLES.get(status, "")
        if holder_gone and status == "queued":
            label, style = "reclaimed", "bold magenta"
        elif kill is not None and status == "running" and job["worker_id"] == kill.worker.worker_id:
            label, style = "holder gone", "bold red"
        bar = self.progress_bar(job, wide)
        if wide and holder_gone and status == "queued" and kill is not None:
            bar.append(f" (was {kill.worker.short})", "magenta")
        worker = self.scenario.short_of(job["worker_id"]) if status != "queued" else ""
        attempt = str(job["attempts"]) if job["attempts"] else ""
        id_style = "bold magenta" if holder_gone else ""
        return [Text(short_id(job_id), id_style), Text(label, style), worker, attempt, bar]

    @staticmethod
    def progress_bar(job: dict[str, Any], wide: bool) -> Text:
        status = job["status"]
        value = 1.0 if status == "succeeded" else (job["progress"]["value"] or 0.0)
        value = max(0.0, min(1.0, value))
        cells = 10 if wide else 5
        filled = round(value * cells)
        bar = Text()
        bar.append("━" * filled, "green" if status == "succeeded" else "yellow")
        bar.append("━" * (cells - filled), "grey30")
        bar.append(f" {int(value * 100):3d}%")
        if wide and status == "running":
            bar.append(f" {job['progress']['stage'] or ''}", "dim")
        return bar

    def workers_table(self) -> Table:
        scenario, s = self.scenario, self.scenario.settings
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1), pad_edge=False)
        for column in ("worker", "pid", "status", "jobs", "heartbeat age", ""):
            table.add_column(column)
        for worker in scenario.workers:
            row = scenario.worker_rows.get(str(worker.worker_id))
            age = scenario.heartbeat_age(row) if row else 0.0
            late = (
                "red" if age > s.lease else ("yellow" if age > s.heartbeat_interval * 1.5 else "")
            )
            table.add_row(
                f"{worker.short} {worker.name}",
                str(worker.proc.pid),
                render.status_text(row["status"] if row else "starting"),
                str(row["running"]) if row else "",
                Text(f"{age:.1f} s", late),
                Text("KILLED (SIGKILL)", "bold red") if worker.killed else Text(""),
            )
        return table
