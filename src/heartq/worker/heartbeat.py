"""The heartbeater: one storage statement per tick renews the worker and all its leases.

Each tick sends, for every attempt the worker still holds, its `(job_id, execution_id)`
and any new progress. The answer says per job: renewed (its trust window moves on),
lost (someone reclaimed it: stop it, report nothing) or cancel requested. An attempt
whose task declared `heartbeat_timeout` and has gone silent for longer is left out of the
renewal, so its lease runs out and the reaper reclaims it though this worker is alive.

Trust is measured from when a renewal was *sent*, on this machine's monotonic clock, so
a slow answer can only make the worker more cautious, never less.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from heartq import events
from heartq.store.interface import Renewal, RenewStatus, Store
from heartq.worker.attempt import RunningJob


class Heartbeater:
    def __init__(
        self,
        store: Store,
        worker_id: str,
        *,
        interval: float,
        lease: float,
        trust_window: float,
        runs: Callable[[], Sequence[RunningJob]],
        on_lost: Callable[[RunningJob, str], None],
        on_cancel: Callable[[RunningJob], None],
        after_success: Callable[[], None] | None = None,
    ) -> None:
        self._store = store
        self._worker_id = worker_id
        self._interval = interval
        self._lease = lease
        self._trust_window = trust_window
        self._runs = runs
        self._on_lost = on_lost
        self._on_cancel = on_cancel
        self._after_success = after_success
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_success: float | None = None
        self.ticks = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="heartq-heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._interval + 5)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.tick()
            except Exception as exc:  # noqa: BLE001 - a bug in one tick must not end them all
                events.emit(
                    events.HEARTBEAT_FAILED, 40, worker_id=self._worker_id, error=repr(exc)
                )

    def tick(self) -> bool:
        """Renew once. Returns False if the database could not be reached."""
        now = time.monotonic()
        held = [run for run in self._runs() if not run.lost]
        renewing = [run for run in held if not run.is_silent(now)]
        progress = {id(run): run.take_progress() for run in renewing}
        renewals = [Renewal(run.job.lease, progress[id(run)]) for run in renewing]
        sent_at = time.monotonic()
        try:
            answers = self._store.heartbeat(self._worker_id, renewals, self._lease)
        except Exception as exc:  # noqa: BLE001 - a failed tick is retried on the next one
            for run in renewing:
                run.restore_progress(progress[id(run)])
            events.emit(
                events.HEARTBEAT_FAILED,
                30,
                worker_id=self._worker_id,
                error=str(exc),
                jobs=len(renewals),
            )
            return False
        self.ticks += 1
        self.last_success = sent_at
        for run in renewing:
            answer = answers.get(run.job.lease, RenewStatus.LOST)
            if answer is RenewStatus.LOST:
                if run.ended is None:  # an ended attempt's finish may simply have landed
                    self._on_lost(run, "renewal refused: the job was reclaimed")
                continue
            run.trusted_until = max(run.trusted_until, sent_at + self._trust_window)
            if answer is RenewStatus.CANCEL_REQUESTED:
                self._on_cancel(run)
        if self._after_success is not None:
            self._after_success()
        events.emit(
            events.HEARTBEAT,
            10,
            worker_id=self._worker_id,
            renewed=len(renewing),
            silent=len(held) - len(renewing),
        )
        return True
