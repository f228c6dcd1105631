"""The supervisor: ends attempts at their deadlines, whatever their code is doing.

Its own thread, so a claim stuck on a locked database cannot delay a timeout or
self-fencing. It sleeps until the earliest deadline of any running attempt (or until the
ledger says a deadline changed) and then:

- an attempt whose lease was not renewed within the trust window is stopped and never
  reported: another worker may hold its job by now (self-fencing). The worker could not
  reach the database: the attempt is marked untrusted, to be given back once it can;
- an attempt past its task's `timeout`, or whose task went silent past its
  `heartbeat_timeout` (a hang: no `ctx.heartbeat()` in time), ends `timed_out`, saved by
  the completer like any end (its worker is alive and holds the lease), unless its pool
  ends these itself (the process pool, on its child's clock);
- an attempt that did not stop within its cancel grace ends `cancelled`.

Events: `leases_untrusted` (error), `maintenance_failed` (service `supervisor`).
"""

from __future__ import annotations

import logging
import time

from heartq import events
from heartq.background import BackgroundLoop, FailureLog
from heartq.lifecycle.fate import AttemptEnd
from heartq.model import Outcome
from heartq.worker.attempt import SETTLED, RunningJob, TransactionState
from heartq.worker.ledger import Ledger

FORCED_CANCEL = (
    "cancelled (forced): the task did not stop within the cancel grace, so its worker "
    "ended the attempt"
)
"""The error of an attempt its worker ended after a cancel's grace (`Cancelled` is what
the task would have raised had it stopped itself)."""
MIN_WAIT = 0.005
"""The supervisor sleeps at least 5 ms between two passes."""


class Supervisor:
    def __init__(self, ledger: Ledger, *, idle_wait: float, trust_window: float) -> None:
        self._ledger = ledger
        self.events = ledger.events
        self._idle_wait = idle_wait
        ledger.supervisor_passes_within = idle_wait  # see `wait_time`: never longer
        self._trust_window = trust_window
        # A pass at once, then one at the earliest deadline or as soon as the ledger says
        # a deadline changed. Supervision must outlive any bug: a failed pass is logged
        # and the next one comes at the next deadline, like any other.
        self._loop = BackgroundLoop(
            "heartq-supervisor",
            self.supervise,
            wait=self.wait_time,
            wake=ledger.deadlines_changed,
            failed=FailureLog(
                self.events,
                events.MAINTENANCE_FAILED,
                {"service": "supervisor", "worker_id": ledger.worker_id},
            ),
            join_timeout=5,
        )

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()

    def wait_time(self) -> float:
        """Seconds until the earliest deadline of any running attempt."""
        wait = self._idle_wait
        now = time.monotonic()
        by_pool = self._ledger.pool_ends_timeouts
        for run in self._ledger.running():
            if run.ended is None and run.transaction not in SETTLED:
                trust = run.trusted_until if run.transaction is TransactionState.NONE else None
                deadline, silent_at = (None, None) if by_pool else (run.deadline, run.silent_at)
                for moment in (trust, deadline, silent_at, run.cancel_deadline):
                    if moment is not None:
                        wait = min(wait, moment - now)
        return max(MIN_WAIT, wait)

    def supervise(self) -> None:
        """One pass: end every attempt past one of its deadlines."""
        now = time.monotonic()
        untrusted = []
        by_pool = self._ledger.pool_ends_timeouts  # the timeouts are its pool's to end
        for run in self._ledger.running():
            if run.ended is not None or run.transaction in SETTLED:
                continue  # decided, or its job completed by its task's transaction
            # An open ctx.transaction() is not fenced here: its commit is, in the database.
            if run.trusted_until <= now and run.transaction is TransactionState.NONE:
                untrusted.append(run)
                self._fence(run)
            elif not by_pool and run.deadline is not None and now >= run.deadline:
                self._ledger.force(run, run.timed_out_end())
            elif not by_pool and run.is_silent(now):
                self._ledger.force(run, run.silent_end())
            elif run.cancel_deadline is not None and now >= run.cancel_deadline:
                self._ledger.force(run, AttemptEnd(Outcome.CANCELLED, error=FORCED_CANCEL))
        if untrusted:
            last = self._ledger.last_renewal
            self.events.emit(
                events.LEASES_UNTRUSTED,
                logging.ERROR,
                worker_id=self._ledger.worker_id,
                job_ids=[r.job.id for r in untrusted],
                since_last_renewal=None if last is None else round(now - last, 3),
                trust_window=self._trust_window,
            )

    def _fence(self, run: RunningJob) -> None:
        """Stop an attempt whose lease this worker no longer trusts."""
        self._ledger.mark_untrusted(run)
        self._ledger.force(run, AttemptEnd(Outcome.LOST, error="lease not renewed in time"))
