"""The demo's scenario: start workers, enqueue, SIGKILL the busiest, follow the recovery.

Everything it knows it reads through the `Store` API, as an operator's tool would: the
jobs and workers every tick, and, for each job the killed worker held, the crash
context its reclaimer wrote (who detected it, when). The live view (`live.py`) and the
summary (`summary.py`) only read this object's state.
"""

from __future__ import annotations

import contextlib
import math
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from heartq import display
from heartq.cli.demo.fleet import Fleet
from heartq.cli.demo.model import (
    DETECTED_BY_LABELS,
    JOB_SECONDS,
    KILL_AFTER,
    KILL_WAIT_MAX,
    MIN_RUN_TIMEOUT,
    TICK,
    DemoFailed,
    DemoSettings,
    DemoWorker,
    Event,
    HeldJob,
    Kill,
    short_id,
)
from heartq.demo_tasks import DEMO_QUEUE, DEMO_TASK, STAGES
from heartq.demo_tasks import app as demo_app
from heartq.display import plural
from heartq.errors import JobNotFound
from heartq.store import Store, open_store

FINISHED = ("succeeded", "dead", "cancelled")


class Scenario:
    """One run of the demo, and everything it has seen so far."""

    def __init__(self, *, url: str | None, jobs: int, workers: int, settings: DemoSettings) -> None:
        self.jobs_wanted = jobs
        self.workers_wanted = workers
        self.settings = settings
        self.workdir = Path(tempfile.mkdtemp(prefix="heartq-demo-"))
        self.url = url or f"sqlite:///{self.workdir / 'demo.db'}"
        try:
            self.store: Store = open_store(self.url)
        except BaseException:
            shutil.rmtree(self.workdir, ignore_errors=True)
            raise
        self.fleet = Fleet(self.url, self.workdir, settings)
        self.job_ids: list[str] = []
        self.jobs: dict[str, dict[str, Any]] = {}
        self.worker_rows: dict[str, dict[str, Any]] = {}
        self.db_now = 0.0
        self.events: list[Event] = []
        self.on_event: Callable[[Event], None] = lambda event: None
        self.kill: Kill | None = None
        self.t0 = time.monotonic()
        self.enqueued_at: float | None = None
        self.finished_at: float | None = None
        slots = settings.concurrency * max(1, workers - 1)
        expected = jobs * sum(JOB_SECONDS) / 2 / slots
        self.run_timeout = max(MIN_RUN_TIMEOUT, 3 * expected + 15)

    @property
    def workers(self) -> list[DemoWorker]:
        return self.fleet.workers

    # -- what happened -----------------------------------------------------------------
    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def note(self, text: str, style: str = "") -> None:
        event = Event(self.elapsed(), text, style)
        self.events.append(event)
        self.on_event(event)

    def name_of(self, worker_id: str | None) -> str:
        found = [w.name for w in self.workers if w.worker_id == worker_id]
        return found[0] if found else worker_id or "-"

    def short_of(self, worker_id: str | None) -> str:
        found = [w.short for w in self.workers if w.worker_id == worker_id]
        return found[0] if found else ("" if worker_id is None else "?")

    def status_counts(self, exclude: set[str] | None = None) -> dict[str, int]:
        counts: dict[str, int] = {}
        for job_id in self.job_ids:
            if exclude and job_id in exclude:
                continue
            status = self.jobs.get(job_id, {}).get("status", "unknown")
            counts[status] = counts.get(status, 0) + 1
        return dict(sorted(counts.items()))

    def heartbeat_age(self, row: dict[str, Any]) -> float:
        last = display.epoch_of(row.get("last_heartbeat_at"))
        return max(0.0, self.db_now - last) if last is not None else 0.0

    # -- the run -----------------------------------------------------------------------
    def run(self, show: Callable[[], None]) -> None:
        """Run the demo, calling `show()` at every tick. Raises `DemoFailed`."""
        self.store.link.migrate()
        self.fleet.start(self.workers_wanted)
        self.note(
            f"started {len(self.workers)} workers "
            f"({', '.join(f'{w.name} pid {w.proc.pid}' for w in self.workers)})"
        )
        self.fleet.wait_registered(self.store)
        self.note(f"all {len(self.workers)} workers registered and heartbeating")
        self.enqueue()
        deadline = self.t0 + self.run_timeout
        while not self.tick():
            if time.monotonic() > deadline:
                show()
                counts = self.status_counts()
                raise DemoFailed(
                    f"timed out after {self.run_timeout:.0f} s with jobs still unfinished "
                    f"({', '.join(f'{n} {s}' for s, n in counts.items())})"
                )
            show()
            time.sleep(TICK)
        show()

    def tick(self) -> bool:
        """One look at the database and one step of the scenario; True once all is done."""
        self.refresh()
        if self.kill is None:
            self.maybe_kill()
        self.track_recovery()
        self.fleet.check_survivors()
        if not self.all_finished():
            return False
        self.finished_at = time.monotonic()
        self.note(
            f"all {len(self.job_ids)} jobs finished in {self.finished_at - self.t0:.1f} s",
            "bold green",
        )
        return True

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
        return len(self.jobs) == len(self.job_ids) and all(
            self.jobs[j]["status"] in FINISHED for j in self.job_ids
        )

    # -- the kill ----------------------------------------------------------------------
    def running(self, worker: DemoWorker) -> int:
        return int(self.worker_rows[str(worker.worker_id)]["running"])

    def maybe_kill(self) -> None:
        """Kill the busiest worker once it holds several jobs (or any, after a while)."""
        assert self.enqueued_at is not None
        waited = time.monotonic() - self.enqueued_at
        candidates = [w for w in self.workers if w.worker_id in self.worker_rows]
        if waited < KILL_AFTER or not candidates:
            return
        middle = (len(self.workers) + 1) / 2
        victim = max(candidates, key=lambda w: (self.running(w), -abs(w.index - middle)))
        per_worker = math.ceil(len(self.job_ids) / len(self.workers))
        several = max(1, min(3, self.settings.concurrency, per_worker))
        busy = self.running(victim)
        if busy < several and not (waited > KILL_WAIT_MAX and busy > 0):
            return
        held = {
            job_id: HeldJob(job_id, row["progress"]["value"], row["progress"]["stage"] or None)
            for job_id, row in self.jobs.items()
            if row["status"] == "running" and row["worker_id"] == victim.worker_id
        }
        clock_before = self.store.clock()
        mono_before = time.monotonic()
        killed_at = self.fleet.kill(victim)
        self.kill = Kill(victim, killed_at, clock_before + (killed_at - mono_before), held)
        self.note(
            f"worker {victim.name} killed (SIGKILL) holding {plural(len(held), 'job')}",
            "bold red",
        )

    # -- the recovery ------------------------------------------------------------------
    def track_recovery(self) -> None:
        kill = self.kill
        if kill is None:
            return
        self._watch_victim(kill)
        self._note_detections(kill)
        self._follow_reruns(kill)

    def _watch_victim(self, kill: Kill) -> None:
        """Note when the killed worker is marked inactive; then look for every job it held
        (it may have claimed one between the snapshot and the kill)."""
        victim_row = self.worker_rows.get(str(kill.worker.worker_id))
        if victim_row and victim_row["status"] != "active" and not kill.inactive_seen:
            kill.inactive_seen = True
            self.note(f"worker {kill.worker.name} marked {victim_row['status']}", "magenta")
        if kill.inactive_seen and not kill.scanned:
            kill.scanned = True
            for job_id in self.job_ids:
                if job_id not in kill.held and self.crash_of(job_id) is not None:
                    kill.held[job_id] = HeldJob(job_id)

    def _note_detections(self, kill: Kill) -> None:
        """Note the held jobs found since the last tick, by the mechanism that found them."""
        fresh: dict[str, list[HeldJob]] = {}
        for held in kill.held.values():
            if held.crash is not None or held.finished_first:
                continue
            job = self.jobs.get(held.job_id)
            if job is None or (
                job["status"] == "running" and job["worker_id"] == kill.worker.worker_id
            ):
                continue
            held.crash = self.crash_of(held.job_id)
            if held.crash is None:
                held.finished_first = True
                continue
            fresh.setdefault(str(held.crash.get("detected_by")), []).append(held)
        for by, found in sorted(fresh.items()):
            self.note(
                f"{plural(len(found), 'held job')} detected via "
                f"{DETECTED_BY_LABELS.get(by, by)} after {self.detection_seconds(found[0]):.2f} s;"
                " queued again in their place in line",
                "bold magenta",
            )

    def _follow_reruns(self, kill: Kill) -> None:
        """Note which survivor picks each held job up, and when all of them succeeded."""
        for held in kill.held.values():
            job = self.jobs.get(held.job_id)
            if held.crash is None or job is None:
                continue
            if (
                held.rerun_by is None
                and job["status"] == "running"
                and job["worker_id"] != kill.worker.worker_id
            ):
                held.rerun_by = self.name_of(job["worker_id"])
                done = (job.get("checkpoint") or {}).get("stages_done", 0)
                resume = f", resuming after stage {STAGES[done - 1]}" if done > 0 else ""
                self.note(
                    f"job {short_id(held.job_id)} picked up by {held.rerun_by} "
                    f"(attempt {job['attempts']}{resume})",
                    "cyan",
                )
            if not held.succeeded and job["status"] == "succeeded":
                held.succeeded = True
                held.rerun_by = held.rerun_by or self.name_of(job["worker_id"])
                recovered = [o for o in kill.held.values() if o.crash is not None]
                if all(o.succeeded for o in recovered):
                    self.note(f"all {len(recovered)} recovered jobs succeeded", "green")

    def crash_of(self, job_id: str) -> dict[str, Any] | None:
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

    def detection_seconds(self, held: HeldJob) -> float:
        assert self.kill is not None and held.crash is not None
        detected = display.epoch_of(held.crash.get("detected_at"))
        return max(0.0, (detected or self.kill.db_time) - self.kill.db_time)

    # -- the end -----------------------------------------------------------------------
    def cleanup(self, graceful: bool, keep: bool) -> None:
        try:
            self.fleet.stop(graceful)
        finally:
            with contextlib.suppress(Exception):
                self.store.link.close()
            with contextlib.suppress(Exception):
                demo_app.close()
            if not keep:
                shutil.rmtree(self.workdir, ignore_errors=True)


def echo_event(event: Event) -> None:
    """How an event is printed without the live view."""
    click.echo(f"[{event.at:5.1f}s] {event.text}")
