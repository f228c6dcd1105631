"""The fetch loop's database side: the statements that fill the worker's free slots,
and starting what they claimed.

A claim takes up to the free slots in one statement (backpressure: never more than the
worker can run), and with `prefetch` N also jobs ahead into the ledger's buffer, which a
freed slot then takes best first, its start recorded in the database before its code
runs (`start_ahead`: from then on a crash counts the attempt). How many to claim and
when is the fetch strategy's (`heartq.worker.fetch`); the statements are here, one
place whichever strategy asks. What was claimed is started on the pool here, whichever
way it came (a claim, the buffer, or a transport's message: `TransportFetch` calls
`start`); what will not run here is given back with no attempt counted
(`release_ahead`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from heartq import events, policy
from heartq.app import App
from heartq.config import Settings
from heartq.lifecycle.ends import unknown_task_end
from heartq.model import Claim, ClaimedJob
from heartq.store.interface import Store
from heartq.worker.attempt import RunningJob
from heartq.worker.ledger import Ledger
from heartq.worker.store_health import StoreHealth

CLAIM_RETRY_DELAY = 1.0
"""After a failed claim (database unreachable), wait this long before the next one."""
RATE_WAKE_MARGIN = 0.005
"""A worker whose claim said when a rate-limited job may start wakes this much after it:
the next claim's statement time is then past the moment the start frees up."""
RATE_WAKE_MIN = 0.01
"""...and never sooner than this after the claim, so an answer of "now" (another claimer
held the key) cannot become a tight loop."""


class Claimer:
    """Claims and starts jobs for the worker `worker_id`, as its fetch strategy asks
    (`heartq.worker.fetch`)."""

    def __init__(
        self,
        worker_id: str,
        app: App,
        ledger: Ledger,
        *,
        settings: Settings,
        health: StoreHealth,
        queues: Sequence[str],
        stop: threading.Event,
    ) -> None:
        self.id = worker_id
        self.app = app
        self.store: Store = app.store
        self.ledger = ledger
        self.settings = settings
        self.health = health
        self.queues = tuple(queues)
        self._stop = stop

    def release_given_back(self) -> None:
        """Give back what waits to be given back (buffered jobs whose cancel was
        requested or whose start was refused, repeats of a forgotten claim): first thing
        in every round of the fetch loop, whatever the strategy."""
        if self.ledger.to_release():
            self.release_ahead(self.ledger.to_release())

    def claim(self, *, for_slots: bool, ahead: int) -> Claim | None:
        """One claim statement: for the free slots if `for_slots` (counted again once the
        claim has the database in hand: those freed while it waited, SQLite's write lock
        behind a finish, are filled too), and up to `ahead` jobs more into the buffer.
        Starts what it claimed. None if the database did not answer (after a pause of
        `CLAIM_RETRY_DELAY`, or until a stop)."""
        sent_at = time.monotonic()
        try:
            slots = self.ledger.free_slots if for_slots else 0
            jobs = self.store.claim(
                self.id, self.queues, slots, self.settings.lease_seconds, ahead=ahead
            )
        except Exception as exc:  # noqa: BLE001 - the database may blip; try again soon
            level = self.health.failed(exc, "claim")
            events.emit(events.CLAIM_FAILED, level, worker_id=self.id, error=str(exc))
            self._stop.wait(CLAIM_RETRY_DELAY)
            return None
        self.health.succeeded("claim", sent_at)
        self.ledger.buffer(self._set_apart_repeats(jobs.ahead))
        self.start(jobs, sent_at)
        return jobs

    def start_ahead(self, free: int) -> int:
        """Start up to `free` buffered jobs, best first: their start recorded in one
        fenced statement before any of their code runs, so a worker that dies from here
        on has their attempt counted (a task that kills its worker cannot loop for
        ever). A job the statement did not start (its cancel was requested; or it was
        reclaimed) never runs here, and is given back. Returns how many started, -1 if
        the database did not answer (the jobs stay in the buffer)."""
        jobs = self.ledger.take_ahead(free)
        sent_at = time.monotonic()
        try:
            leases = [job.lease for job in jobs]
            started = set(self.store.start_ahead(leases, self.settings.lease_seconds))
        except Exception as exc:  # noqa: BLE001 - the database may blip; try again soon
            self.ledger.buffer(jobs)
            level = self.health.failed(exc, "claim")
            events.emit(events.CLAIM_FAILED, level, worker_id=self.id, error=str(exc))
            self._stop.wait(CLAIM_RETRY_DELAY)
            return -1
        self.health.succeeded("claim", sent_at)
        self.ledger.give_back([j for j in jobs if j.lease not in started])
        runs = [j for j in jobs if j.lease in started]
        self._launch(runs, sent_at)  # trusted from the start's statement, which renewed
        return len(runs)

    def release_ahead(self, jobs: list[ClaimedJob]) -> int | None:
        """Give back jobs claimed ahead that will not run here, no attempt counted (a
        job whose cancel was requested ends cancelled). How many the store gave back
        (not those it found lost); None if the database did not answer (they stay to
        give back: retried at the next pass, and at shutdown)."""
        try:
            lost = set(self.store.release([job.lease for job in jobs]))
        except Exception as exc:  # noqa: BLE001 - retried; the lease covers them meanwhile
            events.emit(
                events.JOB_RELEASED,
                self.health.failed(exc, "release"),
                worker_id=self.id,
                error=f"could not release ({exc})",
                job_ids=[job.id for job in jobs],
            )
            return None
        self.ledger.released_ahead(jobs)
        for job in jobs:
            if job.lease not in lost:
                events.emit(events.JOB_RELEASED, job_id=job.id, worker_id=self.id, ahead=True)
        return len(jobs) - len(lost)

    def idle_wait(self, rate_wait: float | None) -> float:
        """How long an idle fetch loop sleeps (unless woken: an enqueue, a freed slot):
        the poll interval, or less when a rate-limited job may start sooner, just after
        that moment (never sooner than `RATE_WAKE_MIN`): a limited backlog is claimed as
        its starts free up, without a claim in between."""
        poll = self.settings.poll_interval
        if rate_wait is None:
            return poll
        return min(poll, max(RATE_WAKE_MIN, rate_wait + RATE_WAKE_MARGIN))

    def _set_apart_repeats(self, jobs: list[ClaimedJob]) -> list[ClaimedJob]:
        """The claimed jobs but those whose lease an attempt of this worker still holds
        (the database forgot a claim and issued its execution id again: `Ledger.
        set_apart_repeats`), which are given back at once, unstarted."""
        fresh = self.ledger.set_apart_repeats(jobs)
        if len(fresh) < len(jobs):
            self.release_ahead(self.ledger.to_release())  # failed: retried next pass
        return fresh

    def start(self, jobs: list[ClaimedJob], sent_at: float) -> None:
        """Run claimed jobs on the pool (from a database claim or a transport's), but
        those the database handed over again (`_set_apart_repeats`)."""
        self._launch(self._set_apart_repeats(jobs) if jobs else jobs, sent_at)

    def _launch(self, jobs: list[ClaimedJob], sent_at: float) -> None:
        """Run jobs on the pool: claimed just now, or taken from the buffer (set apart
        from repeats when they were buffered)."""
        if not jobs:
            return
        s = self.settings
        pool = self.ledger.pool
        assert pool is not None
        runs: list[RunningJob] = []
        unknown: list[RunningJob] = []
        tell = events.wanted(logging.DEBUG)
        trust_window, max_payload_bytes = s.trust_window, s.max_payload_bytes
        for job in jobs:
            task = self.app.tasks.get(job.task)
            run = RunningJob(
                policy.for_attempt(job, task.policy if task else None),
                task,
                self.store,
                claim_sent_at=max(sent_at, job.sent_at),
                trust_window=trust_window,
                max_payload_bytes=max_payload_bytes,
            )
            if tell:
                events.emit(
                    events.JOB_CLAIMED,
                    logging.DEBUG,
                    job_id=job.id,
                    task=job.task,
                    queue=job.queue,
                    attempt=job.attempt,
                    execution_id=job.execution_id,
                    worker_id=self.id,
                    latency=max(0.0, job.lease_expires_at - s.lease_seconds - job.run_at),
                )
            (runs if task is not None else unknown).append(run)
        self.ledger.claimed(*runs, *unknown)
        if unknown:
            self._end_unknown(unknown)
        if runs:
            pool.start(runs)

    def _end_unknown(self, runs: list[RunningJob]) -> None:
        """End the attempts of tasks this app does not register, without running
        anything: whether some worker has declared each task (one read for the batch)
        is the fact their fate turns on (`heartq.lifecycle.fate`: wait for a worker that
        knows it, or dead at once). A read that fails tells nothing: they wait."""
        names = sorted({run.job.task for run in runs})
        try:
            declared: set[str] | None = set(self.store.task_policies(names))
        except Exception:  # noqa: BLE001 - could not tell: bury nothing on a guess
            declared = None
        for run in runs:
            known = None if declared is None else run.job.task in declared
            self.ledger.attempt_ended(run, unknown_task_end(run.job.task, known))
