"""The chaos runner's queue pauses (`tests/soak/chaos.py`, the `process` family's `pause`
kind): an operator pauses one of the run's queues for a few seconds, amid the other
faults, and resumes it (`Store.set_queue_control`, as `heartq queues pause` does).

What is checked (`check`): no attempt of a job of a paused queue that ran its code (the
side file's `start` line) was claimed later than `MARGIN` after the pause was stored and
before the resume was (its execution's `started_at`, the claim's date by the database's
clock, the clock the pause is stored by): every worker obeys within about a second, and
a worker held up (SIGSTOP, a slow database) reads again before it claims or starts
(`heartq.worker.controls`). The claim, not the code's first line, is what a pause
governs: a job claimed before the pause and found open by the start's check runs, and
on a loaded machine its code may begin seconds later (a process-pool worker's first
attempt waits for its forkserver to start and import the app: 1.65-1.87 s at a load
average of 9.5), within `START_SLACK` (beyond it, a start that ignored the pause is
failed too, whenever it was claimed). Whatever the pause, every job still ends as the other
invariants say: the runner resumes every queue before it drains.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tests.soak.chaos_config import START_SLACK, TRANSIENT, Fault, first_line, parse_ts
from tests.soak.chaos_tasks import PROC_QUEUE

if TYPE_CHECKING:
    from tests.soak.chaos_checks import Checker
    from tests.soak.chaos_run import ChaosRun

QUEUES = ("default", PROC_QUEUE)
MARGIN = 3.0
"""Seconds after a pause is stored within which a claim is still allowed: a claim's or a
start's check against a read at most two or three pulses old (0.3 s each in the
runner's settings), on a loaded 2-core machine."""
RESUME_RETRY = 0.5


@dataclass
class Pause:
    queue: str
    paused_at: float
    """When the pause was stored (the database's clock, this machine's)."""
    resumed_at: float | None = None


class QueuePauses:
    """The `pause` faults of one run, and their check."""

    def __init__(self, run: ChaosRun) -> None:
        self.run = run
        self.pauses: list[Pause] = []

    def fault_pause(self) -> None:
        run = self.run
        queue = run.rng.choice(QUEUES)
        if run.pg_down or any(p.queue == queue and p.resumed_at is None for p in self.pauses):
            run.skipped["pause"] += 1
            return
        with run.links.db_lock:
            try:
                stored = run.store.set_queue_control(
                    queue, paused=True, scale=False, concurrency=None, by="chaos"
                )
            except TRANSIENT as exc:
                run.skipped["pause"] += 1
                run.say(f"pause skipped: {first_line(exc)}")
                return
        assert stored.changed_at is not None
        pause = Pause(queue, stored.changed_at)
        self.pauses.append(pause)
        length = run.rng.uniform(2.0, 6.0)
        run.faults.append(Fault("pause", time.time(), None, None, {"queue": queue, "for": length}))
        run.say(f"pause queue {queue} for {length:.1f} s")
        run.after(length, lambda: self.resume(pause))

    def resume(self, pause: Pause) -> bool:
        """Resume `pause`'s queue; tried again until the database takes it. Once only: a
        pause resumed already (by `resume_all` before the drain, ahead of its scheduled
        end) keeps the time it was resumed: written again by the scheduled resume, it
        held every claim of the drain's first seconds to a pause no longer stored (58
        "claimed 4.3-5.9 s into the pause" in one PostgreSQL run, the drain having resumed
        the queue 2.2 s into it)."""
        if pause.resumed_at is not None:
            return True
        run = self.run
        try:
            with run.links.db_lock:
                stored = run.store.set_queue_control(
                    pause.queue, paused=False, scale=False, concurrency=None, by="chaos"
                )
        except TRANSIENT as exc:
            run.say(f"resume of {pause.queue} failed, again soon: {first_line(exc)}")
            run.after(RESUME_RETRY, lambda: self.resume(pause))
            return False
        pause.resumed_at = stored.changed_at
        run.say(f"resumed queue {pause.queue}")
        return True

    def resume_all(self, timeout: float = 60.0) -> None:
        """Before the drain: every queue resumed, whatever the database did meanwhile."""
        deadline = time.monotonic() + timeout
        for pause in self.pauses:
            while pause.resumed_at is None and not self.resume(pause):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"queue {pause.queue} could not be resumed in {timeout} s")
                time.sleep(RESUME_RETRY)

    def check(self, checker: Checker) -> None:
        starts = self.run.side.starts
        late = 0
        for pause in self.pauses:
            end = pause.resumed_at if pause.resumed_at is not None else float("inf")
            for (job_id, eid), doc in starts.items():
                job = checker.jobs.get(job_id)
                if job is None or job["queue"] != pause.queue:
                    continue
                claimed = claimed_at(job, eid, doc["t"])
                began_late = pause.paused_at + MARGIN + START_SLACK < doc["t"] < end
                if pause.paused_at + MARGIN < claimed < end or began_late:
                    late += 1
                    into = claimed - pause.paused_at
                    checker.fail(
                        f"pause: job {job_id} execution {eid} claimed {into:.2f} s into the"
                        f" pause of queue {pause.queue} (allowed: {MARGIN:g} s; its code began"
                        f" {doc['t'] - pause.paused_at:.2f} s into it)"
                    )
        checker.pauses = {
            "pauses": len(self.pauses),
            "paused_seconds": round(
                sum((p.resumed_at or p.paused_at) - p.paused_at for p in self.pauses), 1
            ),
            "late_starts": late,
        }


def claimed_at(job: dict[str, Any], execution_id: int, began: float) -> float:
    """When an attempt was claimed: its execution's `started_at` (set by the claim, or by
    the start of a job claimed ahead, in the statement that decided it runs), or `began`,
    when its code began, if the database has no such execution."""
    for e in job.get("executions", []):
        if e["execution_id"] == execution_id:
            at = parse_ts(e.get("started_at"))
            if at is not None:
                return at
    return began
