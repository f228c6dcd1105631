"""`heartq demo`: watch heartq recover the jobs of a worker killed with SIGKILL.

What it does, on the embedded SQLite default with nothing to install:

1. Creates a temporary directory with a SQLite database (or uses `--url`).
2. Starts `--workers` real worker processes (`python -m heartq worker
   heartq.demo_tasks:app ...`) with demo timings: heartbeat 0.5 s, lease 1.5 s, reap
   0.5 s, liveness probe 0.25 s. Their JSON logs go to files in the temporary directory.
3. Enqueues `--jobs` jobs of 2-5 s that report progress with `ctx.heartbeat(...)`.
4. Waits until one worker holds several running jobs and kills it with a real SIGKILL.
5. Shows the survivors finding the orphaned jobs (the liveness lock is the fast path,
   leases the backstop) and finishing them, then a summary read through the `Store` API:
   which jobs were orphaned, how they were detected and how long detection took.
6. Stops the survivors with SIGTERM and removes its processes and files (unless `--keep`).

Exit status 0 when every job succeeded and at least one was recovered from the killed
worker, 1 otherwise (with a one-line reason).
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import IO, Any

import click
from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from heartq.demo_tasks import DEMO_QUEUE, DEMO_TASK, STAGES
from heartq.demo_tasks import app as demo_app
from heartq.errors import HeartqError, JobNotFound
from heartq.store import Store, open_store, redact

APP_REF = "heartq.demo_tasks:app"
TICK = 0.125
"""Seconds between two looks at the database (and two frames of the live view)."""
KILL_AFTER = 1.0
"""The victim is killed once jobs have been running for at least this long."""
KILL_WAIT_MAX = 10.0
"""If no worker holds several jobs by then, the busiest one is killed anyway."""
START_TIMEOUT = 20.0
"""Seconds the workers get to start and register."""
MIN_RUN_TIMEOUT = 50.0
"""Seconds, from the start of the demo, for every job to finish (more for big --jobs)."""
STOP_TIMEOUT = 8.0
"""Seconds the survivors get to stop on SIGTERM before they are killed."""
JOB_SECONDS = (2.0, 5.0)
"""Each demo job works for a random duration in this range."""
MIN_EVENT_LINES, MAX_EVENT_LINES = 4, 14
"""The live view shows the last 4 to 14 events, as many as the terminal has room for."""
WIDE_CELL, NARROW_CELL = 60, 39
"""Characters one job takes in the live view (with its stage, or without)."""

DETECTED_BY_LABELS = {
    "liveness_lock": "liveness lock",
    "lease_expired": "lease expiry (reaper)",
    "stale_worker": "stale heartbeat (worker monitor)",
    "reconciliation": "restart reconciliation",
    "child_exit": "child exit",
}
NARROW_LABELS = {"succeeded": "done", "cancelled": "cancel"}
STATUS_STYLES = {
    "queued": "dim",
    "running": "yellow",
    "succeeded": "green",
    "dead": "bold red",
    "cancelled": "red",
}


@dataclass(frozen=True)
class DemoSettings:
    """The timings of the demo's workers: the whole protocol in a few seconds."""

    heartbeat_interval: float = 0.5
    lease: float = 1.5
    reap_interval: float = 0.5
    liveness_interval: float = 0.25
    poll_interval: float = 0.1
    concurrency: int = 4
    shutdown_timeout: float = 5.0

    def worker_args(self) -> list[str]:
        return [
            "--concurrency",
            str(self.concurrency),
            "--heartbeat-interval",
            f"{self.heartbeat_interval:g}",
            "--lease",
            f"{self.lease:g}",
            "--reap-interval",
            f"{self.reap_interval:g}",
            "--liveness-interval",
            f"{self.liveness_interval:g}",
            "--poll-interval",
            f"{self.poll_interval:g}",
            "--shutdown-timeout",
            f"{self.shutdown_timeout:g}",
            "--log-format",
            "json",
        ]


class DemoFailed(HeartqError):
    """The demo could not show a recovery; the message is the one-line reason."""


@dataclass
class DemoWorker:
    index: int
    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]
    worker_id: str | None = None
    killed: bool = False

    @property
    def short(self) -> str:
        return f"w{self.index}"


@dataclass
class Orphan:
    """A job the killed worker held: what it was doing, and how it was found."""

    job_id: str
    progress: float | None = None
    stage: str | None = None
    crash: dict[str, Any] | None = None
    finished_first: bool = False  # it finished in the instant before the kill
    rerun_by: str | None = None
    succeeded: bool = False


@dataclass
class Event:
    at: float
    text: str
    style: str = ""


@dataclass
class Kill:
    worker: DemoWorker
    at: float  # on the demo's monotonic clock
    db_time: float  # on the database's clock, to compare with crash contexts
    held: dict[str, Orphan] = field(default_factory=dict)
    inactive_seen: bool = False
    scanned: bool = False


@dataclass(frozen=True)
class JobLayout:
    """How the live view shows the jobs: which, how many per row, how much of each."""

    jobs: list[str]
    groups: int
    rows: int
    wide: bool
    hidden: str  # "12 queued, 6 succeeded": the jobs left out, if any


def short_id(job_id: str) -> str:
    """The random tail of a time-ordered id: jobs enqueued together differ there."""
    return job_id.replace("-", "")[-8:]


def parse_time(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _pdeathsig() -> Callable[[], None] | None:
    """On Linux, a preexec hook asking the kernel to SIGTERM the worker if the demo dies."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def hook() -> None:
        prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the demo died before the hook ran
            os._exit(1)

    return hook


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """While the demo runs, SIGTERM and SIGHUP unwind it like Ctrl-C, so its `finally`
    stops the workers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class Demo:
    def __init__(
        self,
        *,
        url: str | None,
        jobs: int,
        workers: int,
        keep: bool,
        live: bool,
        settings: DemoSettings,
        console: Console,
    ) -> None:
        self.jobs_wanted = jobs
        self.workers_wanted = workers
        self.keep = keep
        self.live_mode = live
        self.settings = settings
        self.console = console
        self.workdir = Path(tempfile.mkdtemp(prefix="heartq-demo-"))
        self.url = url or f"sqlite:///{self.workdir / 'demo.db'}"
        try:
            self.store: Store = open_store(self.url)
        except BaseException:
            shutil.rmtree(self.workdir, ignore_errors=True)
            raise
        self.workers: list[DemoWorker] = []
        self.job_ids: list[str] = []
        self.jobs: dict[str, dict[str, Any]] = {}
        self.worker_rows: dict[str, dict[str, Any]] = {}
        self.db_now = 0.0
        self.events: list[Event] = []
        self.kill: Kill | None = None
        self.t0 = time.monotonic()
        self.enqueued_at: float | None = None
        self.finished_at: float | None = None
        self.last_status_line = 0.0
        self.live: Live | None = None
        self.outcome_ok = False
        self.reason = ""
        slots = settings.concurrency * max(1, workers - 1)
        expected = jobs * sum(JOB_SECONDS) / 2 / slots
        self.run_timeout = max(MIN_RUN_TIMEOUT, 3 * expected + 15)

    # -- output ------------------------------------------------------------------------
    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def note(self, text: str, style: str = "") -> None:
        event = Event(self.elapsed(), text, style)
        self.events.append(event)
        if not self.live_mode:
            click.echo(f"[{event.at:5.1f}s] {text}")

    def name_of(self, worker_id: str | None) -> str:
        for worker in self.workers:
            if worker.worker_id == worker_id:
                return worker.name
        return worker_id or "-"

    def short_of(self, worker_id: str | None) -> str:
        for worker in self.workers:
            if worker.worker_id == worker_id:
                return worker.short
        return "" if worker_id is None else "?"

    # -- processes ---------------------------------------------------------------------
    def start_workers(self) -> None:
        hook = _pdeathsig()
        for index in range(1, self.workers_wanted + 1):
            name = f"demo-worker-{index}"
            log_path = self.workdir / f"{name}.log"
            log_file = log_path.open("wb")
            cmd = [
                sys.executable,
                "-m",
                "heartq",
                "worker",
                APP_REF,
                "--url",
                self.url,
                "--name",
                name,
                *self.settings.worker_args(),
            ]
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C in the terminal reaches the demo alone
                preexec_fn=hook,  # set before the demo starts any thread
            )
            self.workers.append(DemoWorker(index, name, proc, log_path, log_file))
        self.note(
            f"started {len(self.workers)} workers "
            f"({', '.join(f'{w.name} pid {w.proc.pid}' for w in self.workers)})"
        )

    def log_tail(self, worker: DemoWorker, lines: int = 3) -> str:
        try:
            text = worker.log_path.read_text("utf-8", errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(text[-lines:])

    def check_survivors(self) -> None:
        for worker in self.workers:
            if worker.killed:
                continue
            code = worker.proc.poll()
            if code is not None:
                tail = self.log_tail(worker)
                raise DemoFailed(
                    f"worker {worker.name} exited unexpectedly with status {code}"
                    + (f": {tail}" if tail else "")
                )

    def wait_registered(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            self.check_survivors()
            rows = self.store.list_workers()
            for worker in self.workers:
                for row in rows:
                    if row["pid"] == worker.proc.pid and row["name"] == worker.name:
                        worker.worker_id = row["id"]
            if all(w.worker_id for w in self.workers):
                break
            if time.monotonic() > deadline:
                missing = ", ".join(w.name for w in self.workers if not w.worker_id)
                raise DemoFailed(f"workers did not register within {START_TIMEOUT:g} s: {missing}")
            time.sleep(0.05)
        self.note(f"all {len(self.workers)} workers registered and heartbeating")

    def stop_workers(self, graceful: bool) -> None:
        """SIGTERM every worker still alive (twice when not graceful: release at once),
        then SIGKILL whatever outlives STOP_TIMEOUT. Never leaves a process behind."""
        alive = [w for w in self.workers if w.proc.poll() is None]
        for worker in alive:
            self._signal_group(worker, signal.SIGTERM)
        if alive and not graceful:
            time.sleep(0.2)
            for worker in alive:
                if worker.proc.poll() is None:
                    self._signal_group(worker, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        for worker in alive:
            try:
                worker.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._signal_group(worker, signal.SIGKILL)
                worker.proc.wait()
        for worker in self.workers:
            # a session leader that is gone may leave members of its group (children)
            self._signal_group(worker, signal.SIGKILL, leader_gone_ok=True)
            with contextlib.suppress(OSError):
                worker.log_file.close()

    @staticmethod
    def _signal_group(worker: DemoWorker, sig: int, leader_gone_ok: bool = False) -> None:
        if worker.proc.returncode is not None and not leader_gone_ok:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(worker.proc.pid, sig)

    # -- the database ------------------------------------------------------------------
    def enqueue(self) -> None:
        rng = random.Random()
        args = [
            {"report": i + 1, "seconds": round(rng.uniform(*JOB_SECONDS), 1)}
            for i in range(self.jobs_wanted)
        ]
        demo_app.use_url(self.url)
        self.job_ids = demo_app.enqueue_many(DEMO_TASK, args, queue=DEMO_QUEUE)
        self.enqueued_at = time.monotonic()
        self.note(f"enqueued {len(self.job_ids)} jobs of 2-5 s on queue {DEMO_QUEUE!r}")

    def refresh(self) -> None:
        self.db_now = self.store.clock()
        wanted = set(self.job_ids)
        rows = self.store.list_jobs(queue=DEMO_QUEUE, limit=2 * len(wanted) + 100)
        self.jobs.update({row["id"]: row for row in rows if row["id"] in wanted})
        for job_id in wanted - self.jobs.keys():  # only if another run shares the queue
            with contextlib.suppress(JobNotFound):
                self.jobs[job_id] = self.store.get_job(job_id)
        ours = {w.worker_id for w in self.workers}
        self.worker_rows = {
            row["id"]: row for row in self.store.list_workers(include_all=True) if row["id"] in ours
        }

    def all_finished(self) -> bool:
        done = ("succeeded", "dead", "cancelled")
        return len(self.jobs) == len(self.job_ids) and all(
            self.jobs[j]["status"] in done for j in self.job_ids
        )

    # -- the kill ----------------------------------------------------------------------
    def maybe_kill(self) -> None:
        assert self.enqueued_at is not None
        waited = time.monotonic() - self.enqueued_at
        if waited < KILL_AFTER:
            return
        candidates = [w for w in self.workers if w.worker_id in self.worker_rows]
        if not candidates:
            return
        middle = (len(self.workers) + 1) / 2

        def running(worker: DemoWorker) -> int:
            return int(self.worker_rows[str(worker.worker_id)]["running"])

        victim = max(candidates, key=lambda w: (running(w), -abs(w.index - middle)))
        per_worker = math.ceil(len(self.job_ids) / len(self.workers))
        several = max(1, min(3, self.settings.concurrency, per_worker))
        if running(victim) < several and not (waited > KILL_WAIT_MAX and running(victim) > 0):
            return
        held = {
            job_id: Orphan(job_id, row["progress"]["value"], row["progress"]["stage"] or None)
            for job_id, row in self.jobs.items()
            if row["status"] == "running" and row["worker_id"] == victim.worker_id
        }
        clock_before = self.store.clock()
        mono_before = time.monotonic()
        os.kill(victim.proc.pid, signal.SIGKILL)
        killed_mono = time.monotonic()
        victim.killed = True
        victim.proc.wait()
        self.kill = Kill(victim, killed_mono, clock_before + (killed_mono - mono_before), held)
        self.note(
            f"worker {victim.name} killed (SIGKILL) holding {len(held)} "
            f"job{'s' if len(held) != 1 else ''}",
            "bold red",
        )

    def track_recovery(self) -> None:
        kill = self.kill
        if kill is None:
            return
        victim_row = self.worker_rows.get(str(kill.worker.worker_id))
        if victim_row and victim_row["status"] != "active" and not kill.inactive_seen:
            kill.inactive_seen = True
            self.note(f"worker {kill.worker.name} marked {victim_row['status']}", "magenta")
        if kill.inactive_seen and not kill.scanned:
            # it may have claimed a job between the snapshot and the kill: look at all
            kill.scanned = True
            for job_id in self.job_ids:
                if job_id not in kill.held and self._crashed_here(job_id) is not None:
                    kill.held[job_id] = Orphan(job_id)
        fresh: dict[str, list[Orphan]] = {}
        for orphan in kill.held.values():
            if orphan.crash is None and not orphan.finished_first:
                job = self.jobs.get(orphan.job_id)
                if job is None or (
                    job["status"] == "running" and job["worker_id"] == kill.worker.worker_id
                ):
                    continue
                orphan.crash = self._crashed_here(orphan.job_id)
                if orphan.crash is None:
                    orphan.finished_first = True
                    continue
                by = str(orphan.crash.get("detected_by"))
                fresh.setdefault(by, []).append(orphan)
        for by, found in sorted(fresh.items()):
            after = self.detection_seconds(found[0])
            label = DETECTED_BY_LABELS.get(by, by)
            waiting = sum(
                1
                for job_id, job in self.jobs.items()
                if job["status"] == "queued" and job_id not in kill.held
            )
            self.note(
                f"{len(found)} orphaned job{'s' if len(found) != 1 else ''} detected via "
                f"{label} after {after:.2f} s; requeued"
                + (f" behind {waiting} waiting jobs" if waiting else ""),
                "bold magenta",
            )
        for orphan in kill.held.values():
            job = self.jobs.get(orphan.job_id)
            if orphan.crash is None or job is None:
                continue
            if (
                orphan.rerun_by is None
                and job["status"] == "running"
                and job["worker_id"] != kill.worker.worker_id
            ):
                orphan.rerun_by = self.name_of(job["worker_id"])
                done = (job.get("checkpoint") or {}).get("stages_done", 0)
                resume = f", resuming after stage {STAGES[done - 1]}" if done > 0 else ""
                self.note(
                    f"job {short_id(orphan.job_id)} picked up by {orphan.rerun_by} "
                    f"(attempt {job['attempts']}{resume})",
                    "cyan",
                )
            if not orphan.succeeded and job["status"] == "succeeded":
                orphan.succeeded = True
                if orphan.rerun_by is None:
                    orphan.rerun_by = self.name_of(job["worker_id"])
                recovered = [o for o in kill.held.values() if o.crash is not None]
                if all(o.succeeded for o in recovered):
                    self.note(f"all {len(recovered)} recovered jobs succeeded", "green")

    def _crashed_here(self, job_id: str) -> dict[str, Any] | None:
        """The crash context of the killed worker's execution of this job, if it crashed."""
        assert self.kill is not None
        try:
            job = self.store.get_job(job_id)
        except JobNotFound:
            return None
        for execution in job.get("executions", []):
            if (
                execution["worker_id"] == self.kill.worker.worker_id
                and execution["outcome"] == "crashed"
            ):
                crash = execution.get("crash")
                return dict(crash) if isinstance(crash, dict) else {}
        return None

    def detection_seconds(self, orphan: Orphan) -> float:
        assert self.kill is not None and orphan.crash is not None
        detected = parse_time(orphan.crash.get("detected_at"))
        return max(0.0, (detected or self.kill.db_time) - self.kill.db_time)

    # -- the loop ----------------------------------------------------------------------
    def run(self) -> list[str]:
        """Run the demo; returns the summary lines. Raises `DemoFailed`."""
        self.store.migrate()
        self.start_workers()
        self.wait_registered()
        self.enqueue()
        with contextlib.ExitStack() as stack:
            if self.live_mode:
                self.live = stack.enter_context(
                    Live(console=self.console, auto_refresh=False, transient=False)
                )
            deadline = self.t0 + self.run_timeout
            while True:
                self.refresh()
                if self.kill is None:
                    self.maybe_kill()
                self.track_recovery()
                self.check_survivors()
                if self.all_finished():
                    self.finished_at = time.monotonic()
                    self.note(
                        f"all {len(self.job_ids)} jobs finished in "
                        f"{self.finished_at - self.t0:.1f} s",
                        "bold green",
                    )
                    self.show()
                    break
                if time.monotonic() > deadline:
                    self.show()
                    counts = self.status_counts()
                    raise DemoFailed(
                        f"timed out after {self.run_timeout:.0f} s with jobs still unfinished "
                        f"({', '.join(f'{n} {s}' for s, n in counts.items())})"
                    )
                self.show()
                time.sleep(TICK)
        return self.summary()

    def status_counts(self, exclude: set[str] | None = None) -> dict[str, int]:
        counts: dict[str, int] = {}
        for job_id in self.job_ids:
            if exclude and job_id in exclude:
                continue
            status = self.jobs.get(job_id, {}).get("status", "unknown")
            counts[status] = counts.get(status, 0) + 1
        return dict(sorted(counts.items()))

    def show(self) -> None:
        if self.live is not None:
            self.live.update(self.render(), refresh=True)
        elif time.monotonic() - self.last_status_line >= 1.0 or self.finished_at:
            self.last_status_line = time.monotonic()
            click.echo(f"[{self.elapsed():5.1f}s] {self.status_line()}")

    def status_line(self) -> str:
        counts = ", ".join(f"{n} {s}" for s, n in self.status_counts().items())
        workers = []
        for worker in self.workers:
            row = self.worker_rows.get(str(worker.worker_id))
            if row is None:
                continue
            age = self.heartbeat_age(row)
            state = "KILLED/" + row["status"] if worker.killed else row["status"]
            workers.append(f"{worker.name} {state} {row['running']} jobs hb {age:.1f}s")
        return f"jobs: {counts} | " + "; ".join(workers)

    def heartbeat_age(self, row: dict[str, Any]) -> float:
        last = parse_time(row.get("last_heartbeat_at"))
        return max(0.0, self.db_now - last) if last is not None else 0.0

    # -- the live view -----------------------------------------------------------------
    def render(self) -> RenderableType:
        s = self.settings
        header = Text(no_wrap=True, overflow="ellipsis")
        header.append("heartq demo", "bold")
        header.append(
            f"  {len(self.job_ids)} jobs, {len(self.workers)} workers x {s.concurrency}"
            f"  t={self.elapsed():.1f} s"
        )
        header.append(
            f"  (heartbeat {s.heartbeat_interval:g} s, lease {s.lease:g} s, "
            f"reap {s.reap_interval:g} s, liveness {s.liveness_interval:g} s)",
            "dim",
        )
        layout = self.job_layout()
        parts: list[RenderableType] = [header, self.jobs_table(layout)]
        if layout.hidden:
            parts.append(Text(f"  + {layout.hidden}", "dim", no_wrap=True, overflow="ellipsis"))
        parts.append(self.workers_table())
        used = layout.rows + (1 if layout.hidden else 0) + self.fixed_lines() - MIN_EVENT_LINES
        room = max(MIN_EVENT_LINES, min(MAX_EVENT_LINES, self.console.height - used))
        parts.append(Text("events", "bold"))
        for event in self.events[-room:]:
            line = Text(no_wrap=True, overflow="ellipsis")
            line.append(f"[{event.at:5.1f}s] ", "dim")
            line.append(event.text, event.style)
            parts.append(line)
        return Group(*parts)

    def fixed_lines(self) -> int:
        """Lines of the live view besides the job rows: header, the jobs' table head,
        the workers' table, the events' title and the fewest event lines."""
        return 1 + 2 + (2 + len(self.workers)) + 1 + MIN_EVENT_LINES

    def job_layout(self) -> JobLayout:
        """As many jobs per row as the width allows. All jobs with their stage if they fit
        the terminal; else narrower cells; else only the jobs worth watching (running, and
        the killed worker's) and a count of the rest."""
        width, height = self.console.width, self.console.height
        room = max(1, height - self.fixed_lines())
        everything = list(self.job_ids)
        watched = [j for j in everything if self.watched(j)]
        others = self.status_counts(exclude=set(watched))
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
        job = self.jobs.get(job_id)
        if job is None:
            return False
        return job["status"] == "running" or (self.kill is not None and job_id in self.kill.held)

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
        job = self.jobs.get(job_id)
        if job is None:
            return [short_id(job_id), "", "", "", ""]
        status = job["status"]
        kill = self.kill
        orphaned = kill is not None and job_id in kill.held and kill.held[job_id].crash is not None
        label = status if wide else NARROW_LABELS.get(status, status)
        style = STATUS_STYLES.get(status, "")
        if orphaned and status == "queued":
            label, style = "requeued", "bold magenta"
        elif kill is not None and status == "running" and job["worker_id"] == kill.worker.worker_id:
            label, style = "orphaned", "bold red"
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
        elif wide and orphaned and status == "queued" and kill is not None:
            bar.append(f" (was {kill.worker.short})", "magenta")
        worker = self.short_of(job["worker_id"]) if status != "queued" else ""
        attempt = str(job["attempts"]) if job["attempts"] else ""
        id_style = "bold magenta" if orphaned else ""
        return [Text(short_id(job_id), id_style), Text(label, style), worker, attempt, bar]

    def workers_table(self) -> Table:
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1), pad_edge=False)
        for column in ("worker", "pid", "status", "jobs", "heartbeat age", ""):
            table.add_column(column)
        for worker in self.workers:
            row = self.worker_rows.get(str(worker.worker_id))
            status = row["status"] if row else "starting"
            age = self.heartbeat_age(row) if row else 0.0
            age_style = (
                "red"
                if age > self.settings.lease
                else ("yellow" if age > self.settings.heartbeat_interval * 1.5 else "green")
            )
            status_style = {"active": "green", "inactive": "red", "stopped": "dim"}.get(status, "")
            note = Text("KILLED (SIGKILL)", "bold red") if worker.killed else Text("")
            table.add_row(
                f"{worker.short} {worker.name}",
                str(worker.proc.pid),
                Text(status, status_style),
                str(row["running"]) if row else "",
                Text(f"{age:.1f} s", age_style),
                note,
            )
        return table

    # -- the summary -------------------------------------------------------------------
    def summary(self) -> list[str]:
        """Read every job back through the Store API and say what happened."""
        jobs = {job_id: self.store.get_job(job_id) for job_id in self.job_ids}
        total = len(jobs)
        succeeded = [j for j in jobs.values() if j["status"] == "succeeded"]
        lines = ["", "Summary"]
        wall = (self.finished_at or time.monotonic()) - self.t0
        lines.append(
            f"  {len(succeeded)}/{total} jobs succeeded in {wall:.1f} s "
            f"({len(self.workers)} workers x {self.settings.concurrency} slots)"
        )
        kill = self.kill
        recovered: list[tuple[dict[str, Any], dict[str, Any]]] = []
        if kill is None:
            lines.append("  no worker was killed")
        else:
            for job in jobs.values():
                for execution in job["executions"]:
                    if (
                        execution["worker_id"] == kill.worker.worker_id
                        and execution["outcome"] == "crashed"
                    ):
                        recovered.append((job, execution.get("crash") or {}))
            lines.append(
                f"  {kill.worker.name} (pid {kill.worker.proc.pid}) was killed with SIGKILL "
                f"at {kill.at - self.t0:.1f} s; {len(recovered)} of its jobs were orphaned:"
            )
            delays = []
            for job, crash in recovered:
                detected = parse_time(crash.get("detected_at"))
                delay = None if detected is None else max(0.0, detected - kill.db_time)
                if delay is not None:
                    delays.append((str(crash.get("detected_by")), delay))
                final = job["executions"][-1]
                orphan = kill.held.get(job["id"])
                at = ""
                if orphan is not None and orphan.progress is not None:
                    at = f" at {int(orphan.progress * 100)}%"
                    if orphan.stage:
                        at += f" ({orphan.stage})"
                result = job.get("result") or {}
                resumed = result.get("resumed_at_stage") if isinstance(result, dict) else None
                lines.append(
                    f"    {job['id']}  killed{at}; detected by "
                    f"{crash.get('detected_by', '?')}"
                    + (f" after {delay:.2f} s" if delay is not None else "")
                    + f"; attempt {job['attempts']} on {self.name_of(final['worker_id'])} "
                    f"{job['status']}" + (f", resumed at stage {resumed}" if resumed else "")
                )
            if delays:
                by: dict[str, list[float]] = {}
                for name, delay in delays:
                    by.setdefault(name, []).append(delay)
                parts = [
                    f"{DETECTED_BY_LABELS.get(name, name)} for {len(values)} job"
                    f"{'s' if len(values) != 1 else ''} "
                    f"({min(values):.2f}-{max(values):.2f} s after the kill)"
                    if min(values) != max(values)
                    else f"{DETECTED_BY_LABELS.get(name, name)} for {len(values)} job"
                    f"{'s' if len(values) != 1 else ''} ({values[0]:.2f} s after the kill)"
                    for name, values in sorted(by.items())
                ]
                lines.append("  detection: " + "; ".join(parts))
                s = self.settings
                lines.append(
                    f"  (leases alone would have taken up to {s.lease + s.reap_interval:g} s: "
                    f"lease {s.lease:g} s + reap interval {s.reap_interval:g} s)"
                )
        ok_recovered = [job for job, _ in recovered if job["status"] == "succeeded"]
        if len(succeeded) == total and ok_recovered:
            assert kill is not None
            lines.append(
                f"  result: all {total} jobs succeeded; {len(ok_recovered)} recovered from "
                f"the killed worker {kill.worker.name}"
            )
        self.outcome_ok = len(succeeded) == total and bool(ok_recovered)
        if not self.outcome_ok:
            if len(succeeded) != total:
                counts = ", ".join(f"{n} {s}" for s, n in self.status_counts().items())
                self.reason = f"not every job succeeded ({counts})"
            elif kill is None:
                self.reason = "no worker was killed"
            else:
                self.reason = f"no job was recovered from the killed worker {kill.worker.name}"
        if self.keep:
            lines.append(f"  kept: {self.workdir} (worker logs: demo-worker-N.log)")
            lines.append(f"  try: heartq workers --all --url {redact(self.url)}")
            if recovered:
                lines.append(
                    f"       heartq jobs show {recovered[0][0]['id']} --url {redact(self.url)}"
                )
        return lines

    def cleanup(self, graceful: bool) -> None:
        try:
            self.stop_workers(graceful)
        finally:
            with contextlib.suppress(Exception):
                self.store.close()
            with contextlib.suppress(Exception):
                demo_app.close()
            if not self.keep:
                shutil.rmtree(self.workdir, ignore_errors=True)


@click.command("demo")
@click.option(
    "--url",
    default=None,
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
    busiest worker with SIGKILL, and shows the survivors detecting the orphaned jobs and
    finishing them. Exits 0 when every job succeeded and at least one was recovered.
    """
    console = Console(highlight=False)
    live = not no_live and console.is_terminal
    demo = Demo(
        url=url,
        jobs=n_jobs,
        workers=n_workers,
        keep=keep,
        live=live,
        settings=DemoSettings(),
        console=console,
    )
    try:
        with _signals_raise():
            if not live:
                click.echo(
                    f"heartq demo: {n_jobs} jobs, {n_workers} workers, "
                    f"queue {redact(demo.url)} (workdir {demo.workdir})"
                )
            try:
                lines = demo.run()
            except BaseException:
                demo.cleanup(graceful=False)
                raise
            demo.cleanup(graceful=True)
    except KeyboardInterrupt:
        click.echo("heartq demo: interrupted; workers stopped", err=True)
        raise
    except DemoFailed as exc:
        raise DemoFailed(f"demo failed: {exc}") from None
    for line in lines:
        if live:
            console.print(Text(line), soft_wrap=True)
        else:
            click.echo(line)
    click.echo(
        "  survivors stopped with SIGTERM; "
        + (f"files kept in {demo.workdir}" if keep else "temporary files removed")
    )
    if not demo.outcome_ok:
        raise DemoFailed(f"demo failed: {demo.reason}")
