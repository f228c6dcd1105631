"""What a stopping worker hands back to the queue, no attempt counted: the attempts its
shutdown stopped, every job claimed ahead, and its untrusted attempts (the ones whose
lease it stopped trusting).

A database that cannot be written at shutdown (a full disk, a read-only or deleted
SQLite file, a server down) does not make the worker walk away from these jobs: each
hand-back is retried until the shutdown's deadline or a second signal, with one loop
(`HandBack.retry`) for all three, so they pause, stop retrying and hear the second
signal alike. What is still held after that is the worker's `_unsaved`
(`shutdown_unsaved`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from heartq import events
from heartq.errors import StoreUnavailable
from heartq.model import Lease, Outcome
from heartq.store.interface import LeaseHolder
from heartq.worker.attempt import RunningJob
from heartq.worker.claimer import Claimer
from heartq.worker.heartbeat import Heartbeater
from heartq.worker.ledger import Ledger
from heartq.worker.store_health import StoreHealth

T = TypeVar("T")

RETRY_MAX = 0.5
"""At shutdown, a failed hand-back is retried after at most 0.5 s."""
RELEASE_FIRST_PAUSE = 0.05
"""The release of stopped attempts tries again soon at first: the jobs it holds are
what the fleet waits for, and a database blip is usually short."""


class StopRetrying(Exception):
    """Raised by a hand-back attempt that must not be tried again (a refusal for good,
    or the last try before the deadline: `HandBack.retry`)."""


class HandBack:
    """The shutdown's hand-backs for the worker `worker_id`; `force_stop` is its second
    signal, which ends every retry at once."""

    def __init__(
        self,
        worker_id: str,
        store: LeaseHolder,
        ledger: Ledger,
        *,
        claimer: Claimer,
        heartbeater: Heartbeater,
        health: StoreHealth,
        force_stop: threading.Event,
    ) -> None:
        self.id = worker_id
        self.store = store
        self.ledger = ledger
        self.events = ledger.events
        self.claimer = claimer
        self.heartbeater = heartbeater
        self.health = health
        self.force_stop = force_stop

    def retry(self, attempt: Callable[[], T | None], deadline: float, pause: float) -> T | None:
        """`attempt` until it answers (not None), the deadline passes or a second signal
        comes; the pauses between tries start at `pause` and double up to `RETRY_MAX`.
        None if it never answered, or said to stop (`StopRetrying`)."""
        while True:
            try:
                answer = attempt()
            except StopRetrying:
                return None
            if answer is not None:
                return answer
            if self.force_stop.is_set() or time.monotonic() >= deadline:
                return None
            self.force_stop.wait(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 2, RETRY_MAX)

    def release(self, runs: list[RunningJob], deadline: float) -> int:
        """Give the jobs stopped by the shutdown back to the queue, no attempt counted;
        a database that cannot be written is retried until the deadline or a second
        signal, a refusal for good is not. Returns how many were released."""
        released = [run for run in runs if run.ended and run.ended.outcome is Outcome.RELEASED]
        if not released:
            return 0

        def release() -> set[Lease] | None:
            began = time.monotonic()
            try:
                lost = set(self.store.release([run.job.lease for run in released]))
            except Exception as exc:
                level = self.health.failed(exc, "release")
                last_try = (
                    not isinstance(exc, StoreUnavailable)
                    or self.force_stop.is_set()
                    or time.monotonic() >= deadline
                )
                self.events.emit(
                    events.JOB_RELEASED,
                    logging.WARNING if last_try else level,
                    worker_id=self.id,
                    error=f"could not release ({exc})" + ("" if last_try else "; retrying"),
                    job_ids=[run.job.id for run in released],
                )
                if last_try:
                    raise StopRetrying from exc
                return None
            self.health.succeeded("release", began)
            return lost

        lost = self.retry(release, deadline, RELEASE_FIRST_PAUSE)
        if lost is None:
            return 0
        for run in released:
            self.ledger.drop(run)
            if run.job.lease not in lost:
                self.events.emit(events.JOB_RELEASED, job_id=run.job.id, worker_id=self.id)
        return len(released) - len(lost)

    def release_buffer(self, deadline: float) -> int:
        """Give back every job claimed ahead, no attempt counted (they never started),
        retried until the deadline or a second signal. Returns how many."""
        self.ledger.give_back(self.ledger.take_ahead(len(self.ledger.ahead())))
        pending = self.ledger.to_release()
        if not pending:
            return 0
        released = self.retry(lambda: self.claimer.release_ahead(pending), deadline, RETRY_MAX)
        return released or 0

    def give_back_untrusted(self, deadline: float) -> None:
        """Hand back the attempts this worker stopped trusting, until the deadline (the
        heartbeater's hand-back: their jobs need not wait for their leases)."""

        def none_left() -> bool | None:
            self.heartbeater.give_back_untrusted()
            return None if self.ledger.untrusted() else True

        if self.ledger.untrusted() and not self.force_stop.is_set():
            self.retry(none_left, deadline, RETRY_MAX)
