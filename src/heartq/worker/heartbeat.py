"""The heartbeater: one storage statement per tick renews the worker's lease, which
covers every attempt it holds (docs/design/leases.md, "Leases and heartbeats").

Each tick names, for every attempt the worker still holds, its `(job_id, execution_id)`
(what the tasks report is the pulse's to write, `pulse.py`), and every job it claimed
ahead and has not started (`Ledger.ahead`). The answer says per job: renewed (its trust
window moves on), lost (someone reclaimed it: stop it, report nothing) or cancel
requested. Every lease the worker dropped without a written end (`Ledger.to_detach`) is
named to detach instead, so its own lease runs out and the lease reclaimer reclaims it; and
after a claim that raised (its answer may be lost) or once the worker's session came
back (its server may have lost an end: `liveness_events.py`) the tick sweeps: every
running attempt of this worker that it does not name is detached. (A task silent past
its `heartbeat_timeout` is renewed until its worker's supervisor ends it `timed_out`,
saved like any end: `supervisor.py`.)

How many attempts' code the worker has abandoned is the pulse's to record (`pulse.py`):
within about a second of a change, not a heartbeat interval later.

Trust is measured from when a renewal was *sent*, on this machine's monotonic clock, so
a slow answer can only make the worker more cautious, never less. After a renewal the
database answered, the attempts the worker stopped trusting meanwhile are given back
(`give_back_untrusted`), so their jobs need not wait for their leases.

Events: `heartbeat` (debug), `heartbeat_failed`, and through the ledger `lease_lost`
and `job_cancel_requested`.
"""

from __future__ import annotations

import contextlib
import logging
import time

from heartq import events
from heartq.background import BackgroundLoop, FailureLog
from heartq.model import DetectedBy, PulseReport, Renewal, RenewStatus
from heartq.store.interface import LeaseHolder
from heartq.worker.ledger import Ledger
from heartq.worker.store_health import StoreHealth

GIVE_BACK_RETRY = 1.0
"""Seconds between heartbeats while untrusted attempts wait to be given back
(at most the heartbeat interval): they go back once a renewal lands, so a job cut short
by an outage (a failover, a restart) is queued again within about a second of the
database answering, not a whole heartbeat interval (30 s) later."""


class Heartbeater:
    def __init__(
        self,
        store: LeaseHolder,
        ledger: Ledger,
        *,
        interval: float,
        lease: float,
        trust_window: float,
        cancel_grace: float,
        health: StoreHealth | None = None,
    ) -> None:
        self._store = store
        self._health = health or StoreHealth(ledger.worker_id, ledger.events)
        self._ledger = ledger
        self._worker_id = ledger.worker_id
        self.events = ledger.events
        self._lease = lease
        self._trust_window = trust_window
        self._cancel_grace = cancel_grace
        self.ticks = 0
        self._interval = interval
        # Every tick, the first included, one interval after the previous one (or the
        # start); sooner while attempts wait to be given back (`GIVE_BACK_RETRY`, and at
        # once when one is marked untrusted). A bug in one tick must not end them all: logged,
        # and the next one runs.
        self._loop = BackgroundLoop(
            "heartq-heartbeat",
            self.tick,
            wait=self._next_wait,
            wait_first=True,
            wake=ledger.newly_untrusted,
            failed=FailureLog(self.events, events.HEARTBEAT_FAILED, {"worker_id": self._worker_id}),
            join_timeout=interval + 5,
        )

    def start(self) -> None:
        self._loop.start()

    def _next_wait(self) -> float:
        if self._ledger.untrusted():
            return min(self._interval, GIVE_BACK_RETRY)
        return self._interval

    def stop(self) -> None:
        self._loop.stop()

    def tick(self) -> bool:
        """Renew once. Returns False if the database could not be reached."""
        renewing = self._ledger.held()
        ahead = self._ledger.ahead()  # claimed ahead, not started: leased all the same
        renewals = [Renewal(run.job.lease) for run in renewing]
        renewals += [Renewal(job.lease) for job in ahead]
        # What the worker's lease must no longer cover: the leases the worker dropped;
        # after a claim that raised or a session that came back, every attempt of this
        # worker the database has and this beat does not name (`sweep`).
        detach = self._ledger.to_detach()
        sweep = self._ledger.take_sweep()
        sent_at = time.monotonic()
        try:
            answers = self._store.heartbeat(
                self._worker_id, renewals, self._lease, detach=detach, sweep=sweep
            )
        except Exception as exc:  # noqa: BLE001 - a failed tick is retried on the next one
            if sweep:
                self._ledger.request_sweep()
            self.events.emit(
                events.HEARTBEAT_FAILED,
                self._health.failed(exc, "heartbeat"),
                worker_id=self._worker_id,
                error=str(exc),
                jobs=len(renewals),
            )
            return False
        self._health.succeeded("heartbeat", sent_at)
        self._ledger.detach_landed(detach)
        self.ticks += 1
        self._ledger.last_renewal = sent_at
        for run in renewing:
            answer = answers.get(run.job.lease, RenewStatus.LOST)
            if answer is RenewStatus.LOST:
                self._ledger.refused(run, "renewal refused: the job was reclaimed")
                continue
            run.trusted_until = max(run.trusted_until, sent_at + self._trust_window)
            if answer is RenewStatus.CANCEL_REQUESTED:
                self._ledger.request_cancel(run, self._cancel_grace)
        for job in ahead:
            answer = answers.get(job.lease, RenewStatus.LOST)
            if answer is RenewStatus.LOST:
                self._ledger.lose_ahead(job, "renewal refused: the job was reclaimed")
            elif answer is RenewStatus.CANCEL_REQUESTED:
                self._ledger.cancel_ahead(job)
        self.give_back_untrusted()
        self.events.emit(
            events.HEARTBEAT,
            logging.DEBUG,
            worker_id=self._worker_id,
            renewed=len(renewing),
            ahead=len(ahead),
        )
        return True

    def give_back_untrusted(self) -> None:
        """Once the database answers again, close the attempts this worker stopped
        trusting, so their jobs need not wait for their leases (which a heartbeat sent
        before the outage may even have renewed) to run out."""
        for run in self._ledger.untrusted():
            crash = {"reason": run.untrusted_reason}
            unwritten = run.unwritten_report()  # its last checkpoint, for the next attempt
            if unwritten is not None:
                with contextlib.suppress(Exception):  # best effort: the give-back matters
                    self._store.pulse([PulseReport(run.job.lease, unwritten[1])])
            try:
                reclaimed = self._store.crash_attempt(run.job.lease, crash, DetectedBy.SELF_FENCE)
            except Exception:  # noqa: BLE001 - try again after the next good heartbeat
                return
            self._ledger.forget_untrusted(run)
            if reclaimed is not None:
                self.events.reclaimed([reclaimed], DetectedBy.SELF_FENCE)
