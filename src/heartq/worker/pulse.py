"""The pulse: what running tasks report reaches the database within about a second, and
cancels reach the tasks within about a second, at a cost that does not grow with the jobs.

Progress, stage, message and checkpoints a task reports (`ctx.heartbeat(...)`) are kept
on its `RunningJob`; every `pulse_interval` (1 s, at most the heartbeat interval) the
pulse writes what changed since the last pulse that landed, for every attempt of the
worker, in one fenced statement (`Store.pulse`). Nothing is written when nothing changed,
and the lease is left to the heartbeat: the pulse is about what people see, the heartbeat
about who owns a job.

Cancels: on PostgreSQL a cancel request NOTIFYs the worker running the job
(`Link.listen_cancels`); the pulse then reads the cancel requests of the attempts the
worker holds (one read for all of them, each looked up by its own key:
`Store.cancel_requests`) at once. Where the database cannot notify (SQLite), it reads
them every pulse while the worker holds any attempt. Either way a requested cancel
reaches the ledger (`request_cancel`), which tells the task and gives it its grace,
within about a second.

The read asks only about the attempts the ledger holds, so a job claimed before a
notification but handed to the ledger after the read that followed it (its claim still
on its way back, or being started from the buffer) would not be asked about: the pulse
keeps the time of the notification it read for, and reads again, at its next tick, once
the ledger holds a job whose claim was sent before that time and that no read since has
asked about (`ClaimedJob.sent_at`).

Abandoned code: the pulse also records in the worker's registry row how many attempts'
code the worker has abandoned (`Ledger.abandoned`: their end decided, their code still
running and holding its slot), which `heartq workers` shows, whenever that count changed
since it last landed: one small write per change, none while it stays the same, so the
figure is current within about a second (the heartbeat, which once carried it, lagged
by up to its interval, 30 s). The pulse is its only writer, so no older count can land
after a newer one.

A pulse answer that an attempt no longer holds its job is handled as a heartbeat's is:
the attempt is lost, unless its end is already decided or its task's own transaction
is completing it. Events: `pulse_failed` (then the next pulse tries again), and through
the ledger `lease_lost` and `job_cancel_requested`.
"""

from __future__ import annotations

import threading
import time

from heartq import events
from heartq.background import BackgroundLoop, FailureLog
from heartq.model import Lease, PulseReport, RenewStatus
from heartq.store.interface import LeaseHolder
from heartq.store.link import LivenessHandle
from heartq.worker.attempt import RunningJob
from heartq.worker.ledger import Ledger
from heartq.worker.store_health import StoreHealth

JOIN_TIMEOUT = 5.0
"""`stop()` waits at most 5 s for a pulse under way."""


class Pulse:
    def __init__(
        self,
        store: LeaseHolder,
        ledger: Ledger,
        *,
        interval: float,
        cancel_grace: float,
        health: StoreHealth | None = None,
    ) -> None:
        self._store = store
        self._ledger = ledger
        self._worker_id = ledger.worker_id
        self.events = ledger.events
        self._cancel_grace = cancel_grace
        self._health = health or StoreHealth(ledger.worker_id, ledger.events)
        self._wake = threading.Event()
        self._cancel_heard = threading.Event()
        self._heard_at = float("-inf")  # monotonic time of the latest notification
        # Jobs claimed before `_heard_before` (the latest notification a read followed)
        # are asked about by a read after it; `_asked` holds the leases such reads asked.
        self._heard_before = float("-inf")
        self._asked: set[Lease] = set()
        self._listener: LivenessHandle | None = None
        self._polls_cancels = True
        self.pulses = 0
        """Pulse statements that landed (what the benchmark counts)."""
        self._abandoned_recorded = 0  # the count in the worker's row (registered as 0)
        self._loop = BackgroundLoop(
            "heartq-pulse",
            self.tick,
            wait=interval,
            wait_first=True,
            wake=self._wake,
            failed=FailureLog(
                self.events,
                events.PULSE_FAILED,
                {"worker_id": self._worker_id},
                level=lambda exc: self._health.failed(exc, "pulse"),
                describe=str,
            ),
            join_timeout=JOIN_TIMEOUT,
        )

    def start(self) -> None:
        """Listen for cancels where the database can tell, then start pulsing. Called
        before the worker claims anything, so no cancel of a job it holds is missed."""
        self._listener = self._store.link.listen_cancels(self._worker_id, self._on_cancel)
        self._polls_cancels = self._listener is None
        self._loop.start()

    def stop(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        self._loop.stop()

    def _on_cancel(self) -> None:
        """A cancel was requested of one of this worker's jobs (or one may have been
        missed): look at once, whatever the interval."""
        self._heard_at = time.monotonic()  # before the flag: a tick that sees it sees this
        self._cancel_heard.set()
        self._wake.set()

    def tick(self) -> None:
        """One pulse: write what the tasks reported, then look for cancels. Raises what
        the database raised (the loop logs it and tries again at the next pulse)."""
        self._record_abandoned()
        held = self._ledger.held()
        if not held and not self._ledger.ahead():
            return  # a cancel heard now is kept for the job a claim is about to hand over
        self._write_reports(held)
        heard = self._cancel_heard.is_set()
        if heard:
            self._cancel_heard.clear()
            self._heard_before = self._heard_at
            self._asked = set()
        if self._polls_cancels or heard or self._unasked(held):
            try:
                self._read_cancels()
            except BaseException:
                self._cancel_heard.set()  # not lost to a failed read: asked again next pulse
                raise

    def _record_abandoned(self) -> None:
        """Write how many attempts are abandoned, if that changed since it last landed
        (a failed write is tried again at the next pulse)."""
        count = len(self._ledger.abandoned())
        if count != self._abandoned_recorded:
            self._store.record_abandoned(self._worker_id, count)
            self._abandoned_recorded = count

    def flush(self) -> None:
        """Write what the tasks reported now, best effort (before a graceful shutdown
        gives its jobs back, so the next attempt starts from the last checkpoint)."""
        try:
            self._write_reports(self._ledger.held())
        except Exception as exc:  # noqa: BLE001 - the release goes on; logged
            self.events.emit(
                events.PULSE_FAILED,
                self._health.failed(exc, "pulse"),
                worker_id=self._worker_id,
                error=str(exc),
            )

    def _write_reports(self, held: list[RunningJob]) -> None:
        unwritten = [(run, run.unwritten_report()) for run in held]
        pending = [(run, found) for run, found in unwritten if found is not None]
        if not pending:
            return
        reports = [PulseReport(run.job.lease, report) for run, (_, report) in pending]
        sent_at = time.monotonic()
        answers = self._store.pulse(reports)
        self._health.succeeded("pulse", sent_at)
        self.pulses += 1
        for run, (version, _) in pending:
            answer = answers.get(run.job.lease, RenewStatus.LOST)
            if answer is RenewStatus.LOST:
                self._ledger.refused(run, "pulse refused: the job was reclaimed")
                continue
            run.report_written(version)
            if answer is RenewStatus.CANCEL_REQUESTED:
                self._ledger.request_cancel(run, self._cancel_grace)

    def _unasked(self, held: list[RunningJob]) -> bool:
        """Whether the ledger holds a job claimed before the latest notification a read
        followed that no read since asked about (handed over after that read)."""
        before, asked = self._heard_before, self._asked
        if before == float("-inf"):
            return False  # no notification yet
        return any(
            job.sent_at <= before and job.lease not in asked
            for job in (*(run.job for run in held), *self._ledger.ahead())
        )

    def _read_cancels(self) -> None:
        """The cancels requested of this worker's attempts, to the ledger. One the
        ledger no longer holds as it was (its run ended, or it is being started from the
        buffer) when the answer comes is asked about again at the next pulse."""
        held = self._ledger.held()
        leases = [run.job.lease for run in held] + [job.lease for job in self._ledger.ahead()]
        requested = set(self._store.cancel_requests(self._worker_id, leases))
        if not self._polls_cancels:
            self._asked = set(leases)
        for run in self._ledger.held():
            if run.job.lease in requested:
                requested.discard(run.job.lease)
                self._ledger.request_cancel(run, self._cancel_grace)
        for job in self._ledger.ahead():  # claimed ahead: never started, given back
            if job.lease in requested:
                requested.discard(job.lease)
                self._ledger.cancel_ahead(job)
        if requested and not self._polls_cancels:
            self._cancel_heard.set()
