"""What each page shows, read from the store: plain dicts and lists for the templates.

Every read goes through the same `Store` operations and read model (`heartq.inspect`)
as the command line (`job_counts`, `browse_jobs`, `get_job`, `list_workers`, `list_jobs`,
...), so a job claimed ahead shows `claimed` here as there, and every time shown is the
database's (`store.clock()`), so ages agree with what workers judge by.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from heartq import display
from heartq.inspect import fairness, fleet
from heartq.inspect.attempts import attempt_timing, shown_outcome
from heartq.inspect.limits import limits_in_use
from heartq.inspect.queues import queue_overview
from heartq.inspect.states import HELD, SHOWN_STATUSES
from heartq.inspect.stats import count_totals, jobs_by_queue
from heartq.lifecycle.fate import EXPIRED_PREFIX
from heartq.model import JobCount, JobStatus
from heartq.store import Store
from heartq.store.interface import Inspector, Registry
from heartq.timeutil import iso

STATUSES = list(SHOWN_STATUSES)
"""The states a job is shown in (`claimed`: claimed ahead, apart from `running`)."""
CHART_MINUTES = 60
CHART_HEIGHT = 120
CHART_BAR = 10
"""The overview's chart: one bar per minute of the last hour, 10 px wide, 120 px high."""
CHART_SERIES = ("succeeded", "dead", "cancelled")
DLQ_LIMIT = 200
"""The dead-letter page shows the 200 newest dead jobs (the command line lists more)."""
TEXT_CUT = 300
"""Free text in a table (errors, arguments) is cut to 300 characters; a job's own page
shows all of it."""


T = TypeVar("T")
COSTLY_READ_FACTOR = 20.0
"""A costly read (the overview's counts and chart) is repeated no sooner than 20 times as
long as it last took: at most 5 % of the database's time, however many rows there are
and however many pages are open. Small queues are re-read at every refresh."""


class Throttled(Generic[T]):
    """A read whose answer is reused until `COSTLY_READ_FACTOR` times its cost has passed;
    one read at a time (other pages wait for it and share its answer)."""

    def __init__(self, read: Callable[[], T], factor: float = COSTLY_READ_FACTOR) -> None:
        self._read = read
        self._factor = factor
        self._lock = threading.Lock()
        self._value: T | None = None
        self._fresh_until = 0.0
        self.read_at = 0.0

    def get(self) -> T:
        with self._lock:
            started = time.monotonic()
            if self._value is None or started >= self._fresh_until:
                self._value = self._read()
                done = time.monotonic()
                self._fresh_until = done + (done - started) * self._factor
                self.read_at = done
            return self._value

    @property
    def age(self) -> float:
        """Seconds since the answer was read."""
        return time.monotonic() - self.read_at


@dataclass
class Bar:
    x: int
    minute: str
    parts: list[tuple[str, int, int, int]] = field(default_factory=list)
    """(series, count, y, height) from the top down."""

    @property
    def total(self) -> int:
        return sum(p[1] for p in self.parts)


@dataclass
class OverviewReads:
    """The overview's costly reads, shared by every page a dashboard serves."""

    counts: Throttled[list[JobCount]]
    finished: Throttled[list[tuple[float, str, int]]]

    @classmethod
    def of(cls, store: Inspector) -> OverviewReads:
        return cls(
            counts=Throttled(store.job_counts),
            finished=Throttled(lambda: store.finished_per_minute(CHART_MINUTES)),
        )


def overview(store: Store, reads: OverviewReads) -> dict[str, Any]:
    now = store.clock()
    grid = jobs_by_queue(reads.counts.get())
    queues = sorted(grid)
    totals = count_totals(grid)
    workers = workers_view(store, include_all=False, now=now)
    limits = limits_in_use(store)
    return {
        "now": now,
        "queues": queues,
        "grid": grid,
        "totals": totals,
        "chart": chart(reads.finished.get(), now),
        "counted_ago": display.fmt_seconds(reads.counts.age),
        "workers": workers,
        "capacity": sum(w["concurrency"] for w in workers),
        "busy": sum(w["running"] or 0 for w in workers),
        "concurrency": limits.concurrency,
        "rate_limits": [rate_view(r) for r in limits.rate],
        "schedules": schedules_view(store, now),
        "paused": {q for q, c in store.queue_controls().items() if c.paused},
    }


def rate_view(usage: dict[str, Any]) -> dict[str, Any]:
    """A rate key's use as the overview shows it: its figures, and when its next start
    frees up (`-`: it has room)."""
    wait = usage["next_start_in"]
    return dict(usage, next_in="-" if wait is None else f"in {display.fmt_seconds(wait)}")


def chart(rows: list[tuple[float, str, int]], now: float) -> dict[str, Any]:
    """Stacked bars of jobs ended per minute, oldest on the left, scaled to the busiest
    minute; the last bar is the minute under way."""
    first = (now // 60 - (CHART_MINUTES - 1)) * 60
    per_minute: dict[int, dict[str, int]] = {}
    for minute, status, n in rows:
        index = int((minute - first) // 60)
        if 0 <= index < CHART_MINUTES and status in CHART_SERIES:
            per_minute.setdefault(index, {})[status] = n
    peak = max((sum(v.values()) for v in per_minute.values()), default=0)
    bars = []
    for index in range(CHART_MINUTES):
        label = display.fmt_time(_iso(first + 60 * index))[11:16]  # HH:MM (UTC)
        bar = Bar(x=index * CHART_BAR, minute=label)
        top = CHART_HEIGHT
        for series in CHART_SERIES:
            n = per_minute.get(index, {}).get(series, 0)
            if n and peak:
                height = max(1, round(CHART_HEIGHT * n / peak))
                top -= height
                bar.parts.append((series, n, top, height))
        bars.append(bar)
    sums = {s: sum(v.get(s, 0) for v in per_minute.values()) for s in CHART_SERIES}
    return {
        "bars": bars,
        "peak": peak,
        "sums": sums,
        "width": CHART_MINUTES * CHART_BAR,
        "height": CHART_HEIGHT,
    }


def _iso(seconds: float) -> str:
    return iso(seconds) or ""


def workers_view(
    store: Registry, include_all: bool, now: float | None = None
) -> list[dict[str, Any]]:
    """The registry's workers with their heartbeat ages (by the database's clock), and
    `gone` for an active worker whose process is dead (its liveness lock is free) but
    whose jobs no maintenance pass has reclaimed yet."""
    now = store.clock() if now is None else now
    rows = fleet.workers(store, include_all=include_all, now=now)
    for row in rows:
        row["heartbeat_ago"] = display.fmt_ago(row["last_heartbeat_at"], now)
        row["started_ago"] = display.fmt_ago(row["started_at"], now)
        row["stopped_ago"] = display.fmt_ago(row["stopped_at"], now)
    return rows


def queues_view(store: Store) -> list[dict[str, Any]]:
    """`heartq queues`' rows (`heartq.inspect.queues`), with how long ago each control
    changed, and each queue's busiest fairness keys as shown (a count at what is
    counted: `10000+`), under an anchor of their own (queue names are the users')."""
    now = store.clock()
    rows = queue_overview(store)
    for n, row in enumerate(rows):
        changed = row["changed_at"]
        row["changed_ago"] = (
            None if changed is None else display.fmt_seconds(max(0.0, now - changed))
        )
        if row["fair"] is not None:
            row["fair"]["anchor"] = f"fair-{n}"
            for key in row["fair"]["busiest"]:
                key["queued_text"] = fairness.queued_text(key)
                key["weight_text"] = fairness.weight_text(key["weight"])
    return rows


def schedules_view(store: Store, now: float) -> list[dict[str, Any]]:
    rows = store.list_schedules()
    for row in rows:
        row["next_in"] = display.fmt_ago(_iso(row["next_tick"]), now) if row["next_tick"] else "-"
        row["last_ago"] = display.fmt_ago(_iso(row["last_tick"]), now) if row["last_tick"] else "-"
    return rows


def job_row(job: dict[str, Any], now: float) -> dict[str, Any]:
    """A job as one line of a table: times relative to now, long text cut."""
    job["created_ago"] = display.fmt_ago(job["created_at"], now)
    job["finished_ago"] = display.fmt_ago(job["finished_at"], now)
    job["args_text"] = display.compact_json(job["args"], TEXT_CUT)
    job["error_line"] = display.last_line(job["error"], TEXT_CUT)
    job["dead_reason_short"] = _cut(job["dead_reason"])
    job["lease_left"] = lease_left(job, now)
    job["expired"] = job["status"] == JobStatus.CANCELLED and str(
        job.get("error") or ""
    ).startswith(EXPIRED_PREFIX)
    return job


def _cut(text: str | None) -> str:
    if not text:
        return ""
    return text if len(text) <= TEXT_CUT else text[: TEXT_CUT - 1] + "…"


def lease_left(job: dict[str, Any], now: float) -> float | None:
    """Seconds before the lease of a job a worker holds (running or claimed ahead) runs
    out (negative: overdue)."""
    if job["status"] not in HELD:
        return None
    expires = display.epoch_of(job["lease_expires_at"])
    return None if expires is None else expires - now


def job_page(job: dict[str, Any], now: float) -> dict[str, Any]:
    """The job as `heartq jobs show` reads it (`heartq.inspect.jobs.job_detail`: its
    shown state, `worker_gone`, its attempts timed and each in its shown state), laid out
    for its page, times relative to `now` (the database's clock, read before the job)."""
    job = job_row(job, now)
    job["args_pretty"] = pretty(job["args"])
    job["result_pretty"] = pretty(job["result"])
    job["checkpoint_pretty"] = pretty(job["checkpoint"])
    job["lease_left_text"] = display.fmt_seconds(job["lease_left"])
    if job.get("blocked_by"):
        holder = job["blocked_by"]
        job["blocked_by"] = dict(
            holder, error_line=display.last_line(holder["error"] or holder["dead_reason"])
        )
    for execution in job["executions"]:
        took = execution["duration"]  # the figures of `jobs show`, laid out here
        if took is None:
            took = attempt_timing(execution).running_for(now)
        execution["took_text"] = display.fmt_seconds(took)
        execution["detection_delay_text"] = display.fmt_seconds(execution["detection_delay"])
        execution["shown_outcome"] = shown_outcome(execution)
        execution["crash_items"] = sorted((execution["crash"] or {}).items())
    job["executions"].reverse()  # the latest attempt first
    job["now"] = now
    return job


def pretty(value: Any) -> str:
    return "" if value is None else json.dumps(value, indent=2, ensure_ascii=False, default=str)
