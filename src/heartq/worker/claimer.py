"""The fetch loop's database side: how each round fills the worker's free slots (the
fetch strategies), the statements that claim, and starting what they claimed.

The fetch loop runs one strategy, chosen once when the worker is built (`Worker.
_choose_fetch`): the mode never changes while a worker runs, and so the loop carries
no branch per mode. Every strategy answers a `round` with a `Round`; `Worker.run` does
the rest the same way for all of them (go on at once, end a drained burst run, or sleep
until woken):

- `ClaimFetch`: one claim statement for the free slots (backpressure: never more than
  the worker can run). The default.
- `ClaimAheadFetch`: with `prefetch` N, a freed slot takes the best job claimed ahead
  (the ledger's buffer), its start recorded in the database before its code runs
  (`start_ahead`: from then on a crash counts the attempt), and a claim also refills
  the buffer once it is down to half (docs/design/claim.md, "Claim ahead").
- `TransportFetch` (`transport_fetch.py`): a transport's messages name the jobs to
  claim; a `ClaimFetch` runs when the transport cannot deliver, and as its backstop.

The statements are the `Claimer`'s, one place whichever strategy asks. What was claimed
is started on the pool here, whichever way it came (a claim, the buffer, or a
transport's message: `TransportFetch` calls `start`); what will not run here is given
back with no attempt counted (`release_ahead`). A job past its expiry (`expires=`) when
it reaches the pool, by whichever way, is ended there without running (`_end_expired`):
a job that expired while it waited in the buffer is judged at its start, not its claim.

Strategies and statements share this module, not two: a job's road from its claim to
its code then runs through one module fewer (`scripts/road.py`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from heartq import events, policy
from heartq.app import App
from heartq.config import Settings
from heartq.lifecycle.fate import expired_end, unknown_task_end
from heartq.model import Claim, ClaimedJob, Reclaimed
from heartq.store.interface import Store
from heartq.worker.attempt import RunningJob
from heartq.worker.controls import QueueControls
from heartq.worker.ledger import Ledger
from heartq.worker.store_health import StoreHealth

CLAIM_RETRY_DELAY = 1.0
"""After a claim that failed when the one before it had failed too (the database is
unreachable), wait this long before the next one. The first failure after a claim that
went well is tried again at once (`Claimer._failed`)."""
RATE_WAKE_MARGIN = 0.005
"""A worker whose claim said when a rate-limited job may start wakes this much after it:
the next claim's statement time is then past the moment the start frees up."""
RATE_WAKE_MIN = 0.01
"""...and never sooner than this after the claim, so an answer of "now" (another claimer
held the key) cannot become a tight loop."""


@dataclass(frozen=True)
class Round:
    """What one round of the fetch loop did, for `Worker.run` to decide what comes next."""

    claimed: int = 0
    """Jobs started or claimed (0: nothing found, so a burst run asks whether it is done)."""
    busy: bool = False
    """Go round again at once, burst run or not: every free slot was filled, or the
    transport delivered (or was waited on)."""
    rate_wait: float | None = None
    """The claim's `rate_wait`: seconds until a job a rate limit held back may start."""
    idle: float | None = None
    """Unless `busy`: how long to sleep before the next round unless woken (a freed
    slot, an enqueue, a stop); None: no sleep (the transport delivers again at once)."""


class Fetch(Protocol):
    """A fetch strategy: what `Worker.run` calls, whichever way jobs come."""

    def prepare(self, stop: threading.Event) -> None:
        """Make ready once the worker's threads run (before the first round)."""
        ...

    def round(self, burst: bool) -> Round:
        """Fetch once: start what fits in the free slots."""
        ...

    @property
    def on_reclaimed(self) -> Callable[[list[Reclaimed]], None] | None:
        """Told of the jobs the worker's maintenance put back in the queue, if this way
        of fetching must hear of them (a transport publishes them at once); None: the
        next claim finds them in the database."""
        ...


class Claimer:
    """Claims and starts jobs for the worker `worker_id`, as its fetch strategy asks."""

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
        self.events = app.events
        self.store: Store = app.store
        self.ledger = ledger
        self.settings = settings
        # Derived from the settings (properties of `Settings`), read once: a worker's
        # settings never change while it runs, and the claim is the hot path.
        self.lease = settings.lease_seconds
        self.trust_window = settings.trust_window
        self.health = health
        self.queues = tuple(queues)
        self._stop = stop
        self._failing = False  # the last claim (or start) failed
        self.controls: QueueControls | None = None
        """The operator's controls of its queues, once the worker reads them."""

    def release_given_back(self) -> None:
        """Give back what waits to be given back (buffered jobs whose cancel was
        requested or whose start was refused, repeats of a forgotten claim, jobs of a
        queue paused since): first thing in every round of the fetch loop, whatever the
        strategy."""
        self.give_back_held_back()
        if self.ledger.to_release():
            self.release_ahead(self.ledger.to_release())

    def claim(self, *, for_slots: bool, ahead: int) -> Claim | None:
        """One claim statement: for the free slots if `for_slots` (counted again once the
        claim has the database in hand: those freed while it waited, SQLite's write lock
        behind a finish, are filled too), and up to `ahead` jobs more into the buffer.
        Starts what it claimed. None if the database did not answer (`_failed`: the
        next claim may go at once)."""
        sent_at = time.monotonic()
        if self.controls is not None:
            if not self.controls.fresh():
                return Claim()
            if not self.controls.open(self.queues):
                return self._claim_controlled(for_slots, ahead, sent_at)
        try:
            slots = self.ledger.free_slots if for_slots else 0
            jobs = self.store.claim(self.id, self.queues, slots, self.lease, ahead=ahead)
        except Exception as exc:  # noqa: BLE001 - the database may blip; try again soon
            self._failed(exc)
            return None
        return self._claimed(jobs, sent_at)

    def _claimed(self, jobs: Claim, sent_at: float) -> Claim:
        """Start what a claim took (and buffer what it took ahead), but what it took of a
        queue paused meanwhile (`_paused_meanwhile`)."""
        self._failing = False
        self.health.succeeded("claim", sent_at)
        jobs = self.without_paused(jobs)
        if jobs.unanswered:
            self.ledger.request_sweep()
        self.ledger.buffer(self._set_apart_repeats(jobs.ahead))
        self.start(jobs, sent_at)
        return jobs

    def _claim_controlled(self, for_slots: bool, ahead: int, sent_at: float) -> Claim | None:
        """`claim` while an operator controls some of this worker's queues
        (`controls.QueueControls.plan`): a statement per group of queues, each capped
        queue's for its room, the free slots shared in order; claimed ahead only from the
        queues under no control. What the groups before a failed one took is started."""
        assert self.controls is not None
        running = (run.job.queue for run in self.ledger.running())
        groups = self.controls.plan(self.queues, running)
        free = self.ledger.free_slots() if for_slots else 0
        taken: list[ClaimedJob] = []
        buffered: list[ClaimedJob] = []
        waits: list[float] = []
        unanswered = False
        for group in groups:
            limit = free if group.limit is None else min(group.limit, free)
            more = ahead if group.limit is None else 0
            if limit <= 0 and more <= 0:
                continue
            try:
                part = self.store.claim(self.id, group.queues, limit, self.lease, ahead=more)
            except Exception as exc:  # noqa: BLE001 - the database may blip; try again soon
                self._failed(exc)
                if taken or buffered:
                    self._claimed(Claim(taken, None, buffered, True), sent_at)
                return None
            free -= len(part)
            taken.extend(part)
            buffered.extend(part.ahead)
            waits.extend(w for w in (part.rate_wait,) if w is not None)
            unanswered = unanswered or part.unanswered
        jobs = Claim(taken, min(waits) if waits else None, buffered, unanswered)
        return self._claimed(jobs, sent_at)

    def without_paused(self, jobs: Claim) -> Claim:
        """`jobs` (a claim's, or a transport's claim by id) but those of queues an
        operator paused while the claim was on its way (as a read within the last
        interval says: `QueueControls.held_back_now`), which are given back unstarted,
        no attempt counted (the fetch loop's next round releases them; the heartbeat
        renews them until then). A claim that found nothing reads nothing."""
        if self.controls is None or not (jobs or jobs.ahead):
            return jobs
        paused = self.controls.held_back_now()
        taken = [*jobs, *jobs.ahead]
        back = taken if paused is None else [job for job in taken if job.queue in paused]
        if not back:
            return jobs
        self.ledger.give_back(back)
        kept = [job for job in jobs if job not in back]
        ahead = [job for job in jobs.ahead if job not in back]
        return Claim(kept, jobs.rate_wait, ahead, jobs.unanswered)

    def give_back_held_back(self) -> None:
        """Give back the jobs claimed ahead of queues an operator has since paused or
        scaled, unstarted, no attempt counted (`controls.QueueControls.held_back`)."""
        if self.controls is None:
            return
        self.controls.fresh()  # a start obeys a read at most a few intervals old
        held = [job for job in self.ledger.ahead() if self.controls.held_back(job.queue)]
        if held:
            self.ledger.give_back(held)

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
            started = set(self.store.start_ahead(leases, self.lease))
        except Exception as exc:  # noqa: BLE001 - the database may blip; try again soon
            self.ledger.buffer(jobs)
            self._failed(exc)
            return -1
        self._failing = False
        self.health.succeeded("claim", sent_at)
        self.ledger.give_back([j for j in jobs if j.lease not in started])
        runs = [j for j in jobs if j.lease in started]
        self._launch(runs, sent_at)  # trusted from the start's statement, which renewed
        return len(runs)

    def _failed(self, exc: Exception) -> None:
        """A claim or a start the database did not answer (it may have committed, its
        answer lost: the next heartbeat sweeps). The first failure after one that went
        well is most often the claim's connection ended under it (the server terminated
        the worker's sessions, a reset, a failover): the next claim takes a sound
        connection, or waits for one up to the pool's timeout while the server is away,
        so it goes at once. A failure after a failure pauses `CLAIM_RETRY_DELAY` (or
        until a stop): the database is away, and a fault that fails at once (a full
        disk) must not spin. Only a failure after a failure tells `health` (the
        `store_unavailable` line at ERROR): a connection that ended under the claim and
        a claim that went well at once after it is not the database away, and a line at
        ERROR for it sent operators looking for an outage there was not."""
        self.ledger.request_sweep()
        level = self.health.failed(exc, "claim") if self._failing else self.health.level_of(exc)
        self.events.emit(events.CLAIM_FAILED, level, worker_id=self.id, error=str(exc))
        if self._failing:
            self._stop.wait(CLAIM_RETRY_DELAY)
        self._failing = True

    def release_ahead(self, jobs: list[ClaimedJob]) -> int | None:
        """Give back jobs claimed ahead that will not run here, no attempt counted (a
        job whose cancel was requested ends cancelled). How many the store gave back
        (not those it found lost); None if the database did not answer (they stay to
        give back: retried at the next pass, and at shutdown)."""
        try:
            lost = set(self.store.release([job.lease for job in jobs]))
        except Exception as exc:  # noqa: BLE001 - retried; the lease covers them meanwhile
            self.events.emit(
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
                self.events.emit(events.JOB_RELEASED, job_id=job.id, worker_id=self.id, ahead=True)
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

    def start(self, jobs: list[ClaimedJob], sent_at: float, via: str = "database") -> None:
        """Run claimed jobs on the pool (from a database claim or a transport's), but
        those the database handed over again (`_set_apart_repeats`). `via`: the path
        the claim took (`job_claimed`'s field: `database`, or `nats` for a claim by id
        of jobs a transport's wake-ups named)."""
        self._launch(self._set_apart_repeats(jobs) if jobs else jobs, sent_at, via)

    def _launch(self, jobs: list[ClaimedJob], sent_at: float, via: str = "database") -> None:
        """Run jobs on the pool: claimed just now, or taken from the buffer (set apart
        from repeats when they were buffered)."""
        if not jobs:
            return
        pool = self.ledger.pool
        assert pool is not None
        runs: list[RunningJob] = []
        unknown: list[RunningJob] = []
        expired: list[tuple[RunningJob, float]] = []
        now = time.monotonic()
        tell = self.events.wanted(logging.DEBUG)
        trust_window, max_payload_bytes = self.trust_window, self.settings.max_payload_bytes
        for job in jobs:
            task = self.app.tasks.get(job.task)
            run = RunningJob(
                policy.for_attempt(job, task.policy, task.max_snoozes) if task else job,
                task,
                self.store,
                claim_sent_at=max(sent_at, job.sent_at),
                trust_window=trust_window,
                max_payload_bytes=max_payload_bytes,
            )
            if tell:
                self.events.emit(
                    events.JOB_CLAIMED,
                    logging.DEBUG,
                    job_id=job.id,
                    task=job.task,
                    queue=job.queue,
                    attempt=job.attempt,
                    execution_id=job.execution_id,
                    worker_id=self.id,
                    latency=max(0.0, job.lease_expires_at - self.lease - job.run_at),
                    via=via,
                )
            if job.expires_by is not None and job.expires_by <= now:
                expired.append((run, now - job.expires_by))
            else:
                (runs if task is not None else unknown).append(run)
        self.ledger.claimed(*runs, *unknown, *(run for run, _ in expired))
        if expired:
            self._end_expired(expired)
        if unknown:
            self._end_unknown(unknown)
        if runs:
            pool.start(runs)

    def _end_expired(self, expired: list[tuple[RunningJob, float]]) -> None:
        """End the attempts of jobs past their expiry, each with how late it is, without
        running anything: cancelled, not counted (`heartq.lifecycle.fate.expired`)."""
        for run, late in expired:
            self.ledger.attempt_ended(run, expired_end(late))

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


class ClaimFetch:
    """Fill the free slots with one database claim a round (backpressure: never more
    than the worker can run)."""

    on_reclaimed: Callable[[list[Reclaimed]], None] | None = None

    def __init__(self, claimer: Claimer, ledger: Ledger) -> None:
        self.claimer = claimer
        self.ledger = ledger

    def prepare(self, stop: threading.Event) -> None:
        """Nothing to prepare: the worker's startup has reached the database."""

    def round(self, burst: bool) -> Round:
        self.claimer.release_given_back()
        return self._claim(self.ledger.free_slots(), started=0, ahead=0)

    def _claim(self, free: int, started: int, ahead: int) -> Round:
        """Claim for the `free` slots but the `started` ones, and `ahead` more jobs."""
        left = free - started
        if left <= 0 and ahead <= 0:
            return self._round(started, full=free > 0)
        jobs = self.claimer.claim(for_slots=left > 0, ahead=ahead)
        if jobs is None:  # the database did not answer: claim again (the claimer paused
            return Round(claimed=started)  # if it must), not after the poll interval
        filled = free > 0 and started + len(jobs) >= free
        return self._round(started + len(jobs) + len(jobs.ahead), filled, jobs.rate_wait)

    def _round(self, claimed: int, full: bool, rate_wait: float | None = None) -> Round:
        idle = self.claimer.idle_wait(rate_wait)
        return Round(claimed=claimed, busy=full, rate_wait=rate_wait, idle=idle)


class ClaimAheadFetch(ClaimFetch):
    """With `prefetch` N: a freed slot takes the best job claimed ahead, whose start is
    recorded in the database first (`Claimer.start_ahead`); a claim runs, and tops the
    buffer up to N, only when the buffer could not fill every free slot or is down to
    half (topping it up after every start would cost the claim per job that claiming
    ahead saves)."""

    def __init__(self, claimer: Claimer, ledger: Ledger, prefetch: int) -> None:
        super().__init__(claimer, ledger)
        self.prefetch = prefetch

    def round(self, burst: bool) -> Round:
        self.claimer.release_given_back()
        free = self.ledger.free_slots()
        started = 0
        if free > 0 and self.ledger.buffered():
            started = self.claimer.start_ahead(free)
            if started < 0:  # the database did not answer: as after a failed claim
                return Round()
        buffered = self.ledger.buffered()
        refill = free - started > 0 or buffered <= self.prefetch // 2
        return self._claim(free, started, self.prefetch - buffered if refill else 0)
