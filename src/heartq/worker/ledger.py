"""The ledger: every attempt a worker holds, in one place, and how each one ends.

The parts of a worker do not call each other; they read and update the ledger:

- the fetch loop asks it for free slots and records what it claimed (`claimed`);
- a pool reports the end of an attempt's code (`attempt_ended`, once per attempt);
- the supervisor forces an end (a timeout, a forced cancel, an untrusted lease: `force`)
  and marks the attempts whose lease it stopped trusting (`mark_untrusted`);
- the heartbeater renews what is `held()`, reports leases lost (`lose`) and cancels
  requested (`request_cancel`), records its last good renewal (`last_renewal`) and gives
  untrusted attempts back (`untrusted`, `forget_untrusted`);
- the pulse records how many attempts are abandoned (`abandoned`);
- the completer takes ended attempts (`EndedAttempt`) from `outcomes` and records them
  saved (`saved`) or lost (`lose`).

An attempt's end is decided once (`RunningJob.end` is first-wins): whoever comes first,
its code returning or the worker forcing an end, decides the outcome, and the outcome is
queued for the completer at once. Deciding an end and freeing a slot are two things:

- A slot is in use from the attempt's start until its pool reports that its code really
  ended (`executing`): a thread cannot be killed, so a timed-out, force-cancelled or
  lost attempt on the thread pool keeps its slot until its code returns, and the worker
  never runs more task code at once than its concurrency. The process pool reports once
  the killed child is gone (at once), the async pool once the cancelled coroutine
  finishes.
- `abandoned()`: attempts whose end was decided (forced) while their code still runs
  and holds its slot; shown to operators as "abandoned" (`heartq workers`, through the
  pulse).
- `undecided()`: attempts whose end is not decided yet. A graceful shutdown waits for
  these only, never for abandoned code whose outcome is already queued; the outcome is
  queued *before* an attempt stops counting as undecided, so a shutdown that finds none
  finds every outcome already queued.
- `untrusted()`: attempts whose lease the worker stopped trusting because the database
  was out of reach (self-fencing), to be given back to the store by the heartbeater once
  the database answers. Their code may or may not still run (it may then also be
  abandoned).

Jobs claimed ahead (`--prefetch`, docs/design/claim.md "Claim ahead") wait in the ledger's
buffer (`buffer`, `ahead`, `take_ahead`) before they are attempts: their code has not
started, so they take no slot and no deadline applies; the heartbeater renews their
leases with the others and reports those lost (`lose_ahead`) or cancelled
(`cancel_ahead`); the fetch loop takes them when slots free up, records their start in
the database, and gives back (`to_release`) those it must not run.

A claim can hand the worker a lease it still holds an attempt of: a database that forgot
a claim (a failover to an asynchronous standby) issues the same execution id again, and
may issue it to the same worker. Two attempts of one worker under one fencing key could
each renew and finish the other's claim, so the new claim is set apart before it starts
(`set_apart_repeats`) and given back unstarted like a buffered job the worker must not
run; the next claim of the job takes a new execution id (docs/design/database-bad-days.md, "A
failover that forgets a claim").

Slots are not the only bound on claims: the worker holds at most `concurrency +
MAX_UNSAVED` attempts whose outcome is not saved yet, running or ended (`free_slots`).
A slot frees when code returns, not when its outcome is saved, so without this bound a
worker whose finishes went slowly (a bad plan, a slow disk, a lock) claimed on at the
speed of its code, and held ever more jobs whose outcomes waited: each heartbeat renewed
all of them, which made it slower still (459,736 jobs held, a heartbeat of minutes:
BENCHMARKS.md, "The worker, on both backends").

Events: `lease_lost`, `job_cancel_requested`, `claim_repeated`.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Protocol

from heartq import events
from heartq.event_stream import EventStream
from heartq.lifecycle import fate
from heartq.lifecycle.fate import AttemptEnd, CommittedEnd, CrashedEnd
from heartq.model import ClaimedJob, Finish, Lease, Outcome
from heartq.worker.attempt import RunningJob, TransactionState

MAX_UNSAVED = 1000
"""At most this many attempts beyond the concurrency may wait for their outcomes to be
saved before the worker stops claiming: five of the completer's batches (200 each). A
healthy worker of no-op jobs held up to 450 at once (one batch being saved while the
next gathers), so this bound only ever holds back a worker whose saves fall behind."""


_SUCCEEDED = Outcome.SUCCEEDED
_COMMITTED = TransactionState.COMMITTED


class ExecutionPool(Protocol):
    """Where an attempt's code runs (`pools.py`, `process_pool.py`)."""

    ends_timeouts: bool
    """Whether the pool ends its attempts at their `timeout` and their silence's
    (`heartbeat_timeout`) itself: the process pool, whose child says when its code began,
    beat and ended, so that a parent held up (stopped, starved) judges on those times
    rather than on when it got round to reading them. Otherwise the supervisor does
    (`Ledger.pool_ends_timeouts`)."""

    def start(self, runs: Sequence[RunningJob]) -> None:
        """Begin these attempts (a claim's batch, in one go: a pool that must hand work
        to another thread does it once); report each end with
        `ledger.attempt_ended(run, end)`, once per attempt, when its code really ended
        (a stopped attempt too: its slot stays in use until then)."""
        ...

    def stop(self, run: RunningJob) -> None:
        """Stop the attempt's code as hard as this pool can (its end was decided)."""
        ...

    def notify(self, run: RunningJob) -> None:
        """The run's flags (cancel requested, lost) changed: tell the code if it can hear."""
        ...

    def close(self) -> None: ...


EndedAttempt = tuple[RunningJob, Finish | CrashedEnd | CommittedEnd]
"""An ended attempt waiting for the completer, by who decides its job's fate: the worker
(its fenced `Finish`), the store (a `CrashedEnd`), or nobody any more (a `CommittedEnd`:
its task's transaction succeeded the job; its result is left to save)."""


class Ledger:
    """The attempts of one worker. Thread-safe. What befalls them (a lost lease, a cancel
    requested, a repeated claim) is told to the worker's `events`."""

    def __init__(self, worker_id: str, concurrency: int, events: EventStream) -> None:
        self.worker_id = worker_id
        self.events = events
        self.concurrency = concurrency
        self._hold_limit = concurrency + MAX_UNSAVED  # attempts held at most (`free_slots`)
        self.pool: ExecutionPool | None = None  # set once the worker has made its pool
        self.outcomes: queue.SimpleQueue[EndedAttempt | None] = queue.SimpleQueue()
        """Ended attempts for the completer (None: its stop). A `SimpleQueue`, whose put
        and get run in C: every attempt passes through it once."""
        self.slot_freed = threading.Event()
        """Set when a slot frees up (or work may be waiting): wakes the fetch loop."""
        self.deadlines_changed = threading.Event()
        """Set when an attempt gets a new deadline: wakes the supervisor."""
        self.supervisor_passes_within: float | None = None
        """The supervisor looks at every attempt at least this often (seconds; its
        idle wait, set by it): a new attempt whose deadlines all come later needs no
        wake-up (None: every new attempt wakes it)."""
        self.newly_untrusted = threading.Event()
        """Set when the worker marks an attempt untrusted: wakes the heartbeater, which
        gives it back once the database answers."""
        self.last_renewal: float | None = None
        """When the last renewal that the database answered was sent (monotonic)."""
        self._lock = threading.Lock()
        self._runs: dict[Lease, RunningJob] = {}  # by lease: a lost and a new attempt of a job
        self._untrusted: dict[Lease, RunningJob] = {}
        # Attempts whose code has not returned (the slots in use), and those of them
        # whose end is not decided yet (the rest of `_code` lingers).
        self._code: dict[Lease, RunningJob] = {}
        self._undecided: set[Lease] = set()
        # Jobs claimed ahead, not started: best first (claim order), and those to give
        # back unstarted (cancel requested, or refused at their start).
        self._ahead: dict[Lease, ClaimedJob] = {}
        self._give_back: dict[Lease, ClaimedJob] = {}
        # The worker's lease (docs/design/leases.md, "Leases and heartbeats"): leases dropped
        # without an end the database wrote, to detach from it with the next heartbeat
        # that lands; and whether a claim raised since (its answer may be lost: `sweep`).
        self._detach: dict[Lease, None] = {}
        self._sweep = False

    # -- what the parts read -------------------------------------------------------------
    def running(self) -> list[RunningJob]:
        """Every attempt not yet saved, dropped or released."""
        with self._lock:
            return list(self._runs.values())

    def held(self) -> list[RunningJob]:
        """The attempts whose lease this worker still holds (what a heartbeat renews): not
        lost, and not completed by their task's own transaction (those jobs are done)."""
        return [
            run
            for run in self.running()
            if not run.lost and run.transaction is not TransactionState.COMMITTED
        ]

    def executing(self) -> int:
        """Attempts whose code has not returned yet, their end decided or not: the slots
        in use."""
        with self._lock:
            return len(self._code)

    def free_slots(self) -> int:
        """How many attempts a claim may start now: the slots whose code is not running,
        but no more than keep the attempts held (running, or ended with their outcome not
        saved yet) within `concurrency + MAX_UNSAVED` (the module's docstring says why)."""
        with self._lock:
            by_code = self.concurrency - len(self._code)
            by_unsaved = self._hold_limit - len(self._runs)
        return max(0, min(by_code, by_unsaved))

    def undecided(self) -> int:
        """Attempts whose end is not decided yet (what a graceful shutdown waits for)."""
        with self._lock:
            return len(self._undecided)

    def abandoned(self) -> list[RunningJob]:
        """Attempts whose end the worker decided (timed out, cancelled, lost, released)
        while their code still runs and holds its slot: "abandoned" to operators."""
        with self._lock:
            return [run for lease, run in self._code.items() if lease not in self._undecided]

    def untrusted(self) -> list[RunningJob]:
        """Attempts whose lease the worker stopped trusting, not yet given back."""
        with self._lock:
            return list(self._untrusted.values())

    # -- the buffer of jobs claimed ahead ---------------------------------------------
    def buffer(self, jobs: Sequence[ClaimedJob]) -> None:
        """Jobs claimed ahead (or taken and put back), to start when slots free up."""
        with self._lock:
            for job in jobs:
                self._ahead[job.lease] = job
            ordered = sorted(self._ahead.values(), key=_claim_order)
            self._ahead = {job.lease: job for job in ordered}

    def ahead(self) -> list[ClaimedJob]:
        """The jobs claimed ahead and not started, their leases to renew: those waiting
        in the buffer and those waiting to be given back."""
        with self._lock:
            return [*self._ahead.values(), *self._give_back.values()]

    def buffered(self) -> int:
        """How many jobs wait in the buffer (not those waiting to be given back)."""
        with self._lock:
            return len(self._ahead)

    def take_ahead(self, n: int) -> list[ClaimedJob]:
        """The best `n` buffered jobs, out of the buffer (to start them)."""
        with self._lock:
            taken = list(self._ahead.values())[: max(n, 0)]
            for job in taken:
                del self._ahead[job.lease]
        return taken

    def give_back(self, jobs: Sequence[ClaimedJob]) -> None:
        """Buffered jobs the worker must not run (their cancel was requested, their start
        refused): released by the fetch loop, which is woken for it."""
        if not jobs:
            return
        with self._lock:
            for job in jobs:
                self._ahead.pop(job.lease, None)
                self._give_back[job.lease] = job
        self.slot_freed.set()

    def to_release(self) -> list[ClaimedJob]:
        with self._lock:
            return list(self._give_back.values())

    def released_ahead(self, jobs: Sequence[ClaimedJob]) -> None:
        """Jobs claimed ahead that the store gave back (or found lost): forgotten."""
        with self._lock:
            for job in jobs:
                self._give_back.pop(job.lease, None)
                self._ahead.pop(job.lease, None)

    def cancel_ahead(self, job: ClaimedJob) -> None:
        """A cancel was requested of a buffered job: it will never run; its release ends
        it cancelled (no attempt counted)."""
        with self._lock:
            buffered = self._ahead.pop(job.lease, None) is not None
            if buffered:
                self._give_back[job.lease] = job
        if buffered:
            self.events.emit(events.JOB_CANCEL_REQUESTED, job_id=job.id, worker_id=self.worker_id)
            self.slot_freed.set()

    def lose_ahead(self, job: ClaimedJob, reason: str) -> None:
        """A buffered job's lease is gone (reclaimed): forget it, log `lease_lost` once."""
        with self._lock:
            held = (
                self._ahead.pop(job.lease, None) or self._give_back.pop(job.lease, None)
            ) is not None
        if held:
            self.events.emit(
                events.LEASE_LOST,
                logging.WARNING,
                job_id=job.id,
                execution_id=job.execution_id,
                worker_id=self.worker_id,
                reason=reason,
                claimed_ahead=True,
            )

    # -- claims and ends -----------------------------------------------------------------
    def set_apart_repeats(self, jobs: Sequence[ClaimedJob]) -> list[ClaimedJob]:
        """The claimed `jobs` this worker may start (or buffer): all but those whose lease
        an attempt of this worker still holds (running, its code abandoned, its outcome
        unsaved, or waiting to be given back). Those are the database's repeat of a claim
        it forgot: given back unstarted (`to_release`), `claim_repeated` logged."""
        with self._lock:
            runs, code, untrusted = self._runs, self._code, self._untrusted
            repeats = [
                job
                for job in jobs
                if job.lease in runs or job.lease in code or (untrusted and job.lease in untrusted)
            ]
            for job in repeats:
                self._give_back[job.lease] = job
        if not repeats:
            return list(jobs)
        for job in repeats:
            self.events.emit(
                events.CLAIM_REPEATED,
                logging.WARNING,
                job_id=job.id,
                execution_id=job.execution_id,
                worker_id=self.worker_id,
            )
        self.slot_freed.set()
        return [job for job in jobs if job not in repeats]

    def claimed(self, *runs: RunningJob) -> None:
        """Claimed attempts (a claim's batch), about to start on the pool: one lock and
        one wake-up of the supervisor for the batch."""
        notify = self._notify_pool
        with self._lock:
            for run in runs:
                run.on_flags_changed = notify
                lease = run.job.lease
                self._runs[lease] = run
                self._code[lease] = run
                self._undecided.add(lease)
        if self._due_before_next_pass(runs):
            self.deadlines_changed.set()

    @property
    def pool_ends_timeouts(self) -> bool:
        """Whether the pool, not the supervisor, ends its attempts at their timeouts
        (`ExecutionPool.ends_timeouts`)."""
        return self.pool is not None and self.pool.ends_timeouts

    def _due_before_next_pass(self, runs: Sequence[RunningJob]) -> bool:
        """Whether a new attempt has a deadline (its trust window, its timeout, its
        silence's) before the supervisor's next pass at the latest: only then is it woken
        (a wake-up per claim, and its pass over every attempt, cost a busy worker a tenth
        of its time). Its next pass comes within `supervisor_passes_within` of now, and it
        sees these attempts then, as they are in the ledger already."""
        if self.supervisor_passes_within is None:
            return True
        horizon = time.monotonic() + self.supervisor_passes_within
        if self.pool_ends_timeouts:  # only the trust windows are the supervisor's
            return any(run.trusted_until < horizon for run in runs)
        return any(
            run.trusted_until < horizon
            or (run.deadline is not None and run.deadline < horizon)
            or (run.heartbeat_timeout is not None and run.started + run.heartbeat_timeout < horizon)
            for run in runs
        )

    def attempt_ended(self, run: RunningJob, end: AttemptEnd) -> None:
        """An attempt's code ended (its pool reports it, once per attempt): this decides
        its end unless the worker already did (`force`: then `end` comes late), and frees
        its slot."""
        if run.end(end):
            self._queue_outcome(run)
        lease = run.job.lease
        with self._lock:
            self._undecided.discard(lease)
            freed = self._code.pop(lease, None) is not None
        if freed:
            self._wake_fetch()

    def force(self, run: RunningJob, end: AttemptEnd) -> None:
        """Decide an attempt's end without waiting for its code, then stop the code. Its
        slot stays in use until its pool reports the code ended (`attempt_ended`).

        The end is recorded first: telling the code (the flags notify its pool, which may
        cancel it on another thread) makes it end too, and that later end must come late."""
        if run.end(end):
            self._queue_outcome(run)
            with self._lock:
                self._undecided.discard(run.job.lease)
        if end.outcome is Outcome.CANCELLED:
            run.mark_cancel_requested()
        elif end.outcome is Outcome.LOST:
            run.mark_lost()  # ctx.heartbeat() raises LeaseLost; nothing will be reported
        else:
            run.mark_stopping()  # ctx.cancelled turns True; the outcome is still saved
        if self.pool is not None:
            self.pool.stop(run)

    def _queue_outcome(self, run: RunningJob) -> None:
        """Hand a decided attempt to the completer (or report its lease lost)."""
        end = run.ended
        assert end is not None  # as recorded: a success after a cancel request is cancelled
        if end.outcome is _SUCCEEDED and run.transaction is not _COMMITTED:
            # Most ends, first: the last branch below (one read of a member off its enum
            # class per branch was 0.1 to 0.25 us on Python 3.11, `EnumType.__getattr__`)
            finish = fate.decide(run.job, end, run.cancel_requested, run.report_to_save())
            self.outcomes.put((run, finish))
            return
        if run.transaction is TransactionState.COMMITTED:
            self.outcomes.put((run, CommittedEnd(end)))
        elif end.outcome is Outcome.LOST:
            self.lose(run, end.error or "lease lost")
        elif end.outcome is Outcome.CRASHED:
            self.outcomes.put((run, CrashedEnd(end)))
        elif end.database_away and fate.outcome_of(end, run.cancel_requested) is Outcome.FAILED:
            # Not the job's failure: given back once the database answers (self-fencing)
            run.untrusted_reason = "its task could not reach the queue's database"
            self.mark_untrusted(run)
            self.lose(run, run.untrusted_reason)
        elif end.outcome is not Outcome.RELEASED:  # shutdown releases those together
            finish = fate.decide(run.job, end, run.cancel_requested, run.report_to_save())
            if end.retry_delay_error is not None:
                self._retry_delay_failed(run, end.retry_delay_error, finish.retry_delay)
            self.outcomes.put((run, finish))

    def _retry_delay_failed(self, run: RunningJob, error: str, wait: float) -> None:
        """Tell that a task's `retry_delay` gave no wait (it raised, or answered no number
        of seconds), so its other rules did: `retry_delay_failed`, once per attempt."""
        self.events.emit(
            events.RETRY_DELAY_FAILED,
            logging.WARNING,
            job_id=run.job.id,
            task=run.job.task,
            attempt=run.job.attempt,
            worker_id=self.worker_id,
            error=error,
            retry_in=round(wait, 3),
        )

    def refused(self, run: RunningJob, reason: str) -> None:
        """A fenced write of the attempt's worker (a renewal, a pulse) matched no job: the
        lease is gone, unless the attempt's end is decided already (its finish may simply
        have landed) or its task's transaction is completing the job (its commit is
        fenced: it decides)."""
        if run.ended is None and run.transaction is TransactionState.NONE:
            self.lose(run, reason)

    def lose(self, run: RunningJob, reason: str) -> None:
        """The attempt's lease is gone (reclaimed, refused, untrusted): stop its code if it
        still runs, report nothing of it, and log `lease_lost` once. The worker no longer
        names it in its heartbeat, so it is detached from the worker's lease by the next
        one (`to_detach`): where no end was written, the attempt's own lease runs out."""
        run.mark_lost()
        with self._lock:
            self._detach[run.job.lease] = None
        if run.ended is None:
            self.force(run, AttemptEnd(Outcome.LOST, error=reason))
            return
        if not self.drop(run):
            return  # already reported
        self.events.emit(
            events.LEASE_LOST,
            logging.WARNING,
            job_id=run.job.id,
            execution_id=run.job.execution_id,
            worker_id=self.worker_id,
            reason=reason,
        )

    def request_cancel(self, run: RunningJob, grace: float) -> None:
        """A cancel was requested: the code is told, and gets `grace` seconds to stop."""
        if run.cancel_requested:
            return
        run.cancel_deadline = time.monotonic() + grace
        run.mark_cancel_requested()
        self.events.emit(events.JOB_CANCEL_REQUESTED, job_id=run.job.id, worker_id=self.worker_id)
        self.deadlines_changed.set()

    def saved(self, runs: Iterable[RunningJob]) -> None:
        """The completer saved these attempts' outcomes (a batch's, under one lock): the
        worker is done with them."""
        self._forget(runs)

    def drop(self, run: RunningJob) -> bool:
        """Forget the attempt; False if it was already forgotten."""
        return self._forget((run,)) > 0

    def _forget(self, runs: Iterable[RunningJob]) -> int:
        """Forget attempts; how many were still held. The fetch loop is woken when this
        brings the attempts held back under their bound (`free_slots`), and when it
        forgets the last one: a burst run's own unsaved outcomes are the work it waits
        for (the freed slot woke it before the save), so without this it slept a whole
        poll interval after its last job before it could exit."""
        with self._lock:
            before = len(self._runs)
            for run in runs:
                self._runs.pop(run.job.lease, None)
            after = len(self._runs)
        if after < before and (before >= self._hold_limit > after or not after):
            self._wake_fetch()
        return before - after

    def _wake_fetch(self) -> None:
        """Wake the fetch loop, after the change it must see (a freed slot, a dropped
        attempt) is made: at most once until it wakes. While `slot_freed` is set, the
        loop has not cleared it yet, so it reads the ledger after this change anyway,
        and no thread can be waiting on it (the set that raised it woke them all); an
        `Event.set` takes its condition's lock and wakes nobody, once per attempt."""
        if not self.slot_freed.is_set():
            self.slot_freed.set()

    # -- the worker's lease ---------------------------------------------------------------
    def to_detach(self) -> list[Lease]:
        """Leases this worker dropped (`lose`) that its heartbeat must detach from its
        lease: their attempt may still be running in the database, and no end of theirs
        was written; until a heartbeat naming them lands (`detach_landed`)."""
        with self._lock:
            return list(self._detach)

    def detach_landed(self, leases: Iterable[Lease]) -> None:
        with self._lock:
            for lease in leases:
                self._detach.pop(lease, None)

    def request_sweep(self) -> None:
        """A claim raised (it may have committed with its answer lost), or the worker's
        session came back (its server may have lost the last commits: `liveness_events`),
        so the next heartbeat detaches every running attempt of this worker it does not
        name."""
        self._sweep = True

    def take_sweep(self) -> bool:
        """Whether a sweep is due (cleared: put it back with `request_sweep` if the
        heartbeat that carried it failed)."""
        with self._lock:
            due, self._sweep = self._sweep, False
        return due

    # -- self-fencing ------------------------------------------------------------------
    def mark_untrusted(self, run: RunningJob) -> None:
        """The worker stopped trusting this attempt's lease (the database out of reach):
        give it back once it can."""
        with self._lock:
            self._untrusted[run.job.lease] = run
        self.newly_untrusted.set()

    def forget_untrusted(self, run: RunningJob) -> None:
        with self._lock:
            self._untrusted.pop(run.job.lease, None)

    def _notify_pool(self, run: RunningJob) -> None:
        if self.pool is not None:
            self.pool.notify(run)


def _claim_order(job: ClaimedJob) -> tuple[int, float, str]:
    """Best first, as a claim orders its jobs: priority (highest first), then age."""
    return (-job.priority, job.run_at, job.id)
