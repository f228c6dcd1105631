"""The ledger: every attempt a worker holds, in one place, and how each one ends.

The parts of a worker do not call each other; they read and update the ledger:

- the fetch loop asks it for free slots and records what it claimed (`claimed`);
- a pool reports the end of an attempt's code (`attempt_ended`);
- the supervisor forces an end (a timeout, a forced cancel, an untrusted lease: `force`)
  and abandons what it stopped trusting (`abandon`);
- the heartbeater renews what is `held()`, reports leases lost (`lose`) and cancels
  requested (`request_cancel`), records its last good renewal (`last_renewal`) and gives
  abandoned attempts back (`abandoned`, `forget_abandoned`);
- the completer takes ended attempts (`EndedAttempt`) from `outcomes` and records them
  saved (`saved`) or lost (`lose`).

An attempt's end is decided once (`RunningJob.end` is first-wins): whoever comes first,
its code returning or the worker forcing an end, decides the outcome. The outcome is
handed to the completer *before* the slot is freed, so a shutdown that finds no attempt
executing finds every outcome already queued. Events: `lease_lost`,
`job_cancel_requested`.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Sequence
from typing import Protocol

from heartq import events
from heartq.lifecycle import fate
from heartq.lifecycle.ends import AttemptEnd, CommittedEnd, CrashedEnd
from heartq.model import Finish, Lease, Outcome
from heartq.worker.attempt import RunningJob, TransactionState


class ExecutionPool(Protocol):
    """Where an attempt's code runs (`pools.py`, `process_pool.py`)."""

    def start(self, runs: Sequence[RunningJob]) -> None:
        """Begin these attempts (a claim's batch, in one go: a pool that must hand work
        to another thread does it once); report each end with
        `ledger.attempt_ended(run, end)`."""
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
    """The attempts of one worker. Thread-safe."""

    def __init__(self, worker_id: str, concurrency: int) -> None:
        self.worker_id = worker_id
        self.concurrency = concurrency
        self.pool: ExecutionPool | None = None  # set once the worker has made its pool
        self.outcomes: queue.Queue[EndedAttempt | None] = queue.Queue()
        self.slot_freed = threading.Event()
        """Set when a slot frees up (or work may be waiting): wakes the fetch loop."""
        self.deadlines_changed = threading.Event()
        """Set when an attempt gets a new deadline: wakes the supervisor."""
        self.last_renewal: float | None = None
        """When the last renewal that the database answered was sent (monotonic)."""
        self._lock = threading.Lock()
        self._runs: dict[Lease, RunningJob] = {}  # by lease: a lost and a new attempt of a job
        self._abandoned: dict[Lease, RunningJob] = {}
        self._executing = 0

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
        """Attempts whose code has not ended yet: the slots in use."""
        with self._lock:
            return self._executing

    def free_slots(self) -> int:
        return self.concurrency - self.executing()

    def abandoned(self) -> list[RunningJob]:
        with self._lock:
            return list(self._abandoned.values())

    # -- claims and ends -----------------------------------------------------------------
    def claimed(self, *runs: RunningJob) -> None:
        """Claimed attempts (a claim's batch), about to start on the pool: one lock and
        one wake-up of the supervisor for the batch."""
        for run in runs:
            run.on_flags_changed = self._notify_pool
        with self._lock:
            for run in runs:
                self._runs[run.job.lease] = run
            self._executing += len(runs)
        self.deadlines_changed.set()

    def attempt_ended(self, run: RunningJob, end: AttemptEnd) -> None:
        """An attempt's code ended (from its pool), or the worker decided its end (`force`);
        only the first end of an attempt counts."""
        if not run.end(end):
            return
        end = run.ended or end  # as recorded: a success after a cancel request is cancelled
        if run.transaction is TransactionState.COMMITTED:
            self.outcomes.put((run, CommittedEnd(end)))
        elif end.outcome is Outcome.LOST:
            self.lose(run, end.error or "lease lost")
        elif end.outcome is Outcome.CRASHED:
            self.outcomes.put((run, CrashedEnd(end)))
        elif end.outcome is not Outcome.RELEASED:  # shutdown releases those together
            finish = fate.decide(run.job, end, run.cancel_requested, run.last_report())
            self.outcomes.put((run, finish))
        with self._lock:
            self._executing -= 1
        self.slot_freed.set()

    def force(self, run: RunningJob, end: AttemptEnd) -> None:
        """Decide an attempt's end without waiting for its code, then stop the code.

        The end is recorded first: telling the code (the flags notify its pool, which may
        cancel it on another thread) makes it end too, and that later end must be stale."""
        self.attempt_ended(run, end)
        if end.outcome is Outcome.CANCELLED:
            run.mark_cancel_requested()
        elif end.outcome is Outcome.LOST:
            run.mark_lost()  # ctx.heartbeat() raises LeaseLost; nothing will be reported
        else:
            run.mark_stopping()  # ctx.cancelled turns True; the outcome is still saved
        if self.pool is not None:
            self.pool.stop(run)

    def lose(self, run: RunningJob, reason: str) -> None:
        """The attempt's lease is gone (reclaimed, refused, untrusted): stop its code if it
        still runs, report nothing of it, and log `lease_lost` once."""
        run.mark_lost()
        if run.ended is None:
            self.force(run, AttemptEnd(Outcome.LOST, error=reason))
            return
        if not self.drop(run):
            return  # already reported
        events.emit(
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
        events.emit(events.JOB_CANCEL_REQUESTED, job_id=run.job.id, worker_id=self.worker_id)
        self.deadlines_changed.set()

    def saved(self, run: RunningJob) -> None:
        """The completer saved the attempt's outcome: the worker is done with it."""
        self.drop(run)

    def drop(self, run: RunningJob) -> bool:
        """Forget the attempt; False if it was already forgotten."""
        with self._lock:
            return self._runs.pop(run.job.lease, None) is not None

    # -- self-fencing ------------------------------------------------------------------
    def abandon(self, run: RunningJob) -> None:
        """The worker stopped trusting this attempt's lease: give it back once it can."""
        with self._lock:
            self._abandoned[run.job.lease] = run

    def forget_abandoned(self, run: RunningJob) -> None:
        with self._lock:
            self._abandoned.pop(run.job.lease, None)

    def _notify_pool(self, run: RunningJob) -> None:
        if self.pool is not None:
            self.pool.notify(run)
