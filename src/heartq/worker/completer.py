"""The completer: saves finished attempts in batches, one fenced statement per batch.

Ended attempts queue up in the ledger (`Ledger.outcomes`); the completer flushes every
`flush_interval` (a few milliseconds) or every `batch_size` attempts. An outcome counts
as saved only once that commit returned. If the database cannot be reached, the batch
is retried with backoff for as long as each attempt's lease is trusted: the heartbeater
keeps renewing them while the database answers it, and once it cannot, trust runs out
and the attempt is dropped unreported, since another worker may hold its job by then. A
write that fencing refuses means the lease was lost: nothing of it landed. An attempt
whose child process died is recorded as crashed at once (`Store.crash_attempt`,
`detected_by=child_exit`).

Events: `job_succeeded`, `job_cancelled`, `job_failed`, `job_timed_out`,
`job_retry_scheduled`, `job_dead`, `job_crashed`, `completion_retry`.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any

from heartq import events, outcomes
from heartq.errors import StoreUnavailable
from heartq.maintenance.services import report_reclaimed
from heartq.store.interface import DetectedBy, Finish, JobStatus, Outcome, Store
from heartq.worker.attempt import RunningJob
from heartq.worker.ledger import ChildCrash, Ledger

DEFAULT_FLUSH_INTERVAL = 0.005
"""Defaults to 5 ms: how long the completer gathers finished jobs into one batch."""
DEFAULT_BATCH_SIZE = 200
"""Defaults to 200 attempts per batch."""
RETRY_BACKOFF = (0.05, 0.1, 0.25, 0.5, 1.0)

Item = tuple[RunningJob, Finish]


class Completer:
    def __init__(
        self,
        store: Store,
        ledger: Ledger,
        *,
        flush_interval: float = DEFAULT_FLUSH_INTERVAL,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> None:
        self._store = store
        self._ledger = ledger
        self._worker_id = ledger.worker_id
        self._flush_interval = flush_interval
        self._batch_size = batch_size
        self._queue = ledger.outcomes
        self._thread = threading.Thread(target=self._loop, name="heartq-completer", daemon=True)
        self._stopping = threading.Event()
        self.batches = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float) -> None:
        """Flush what is queued (within `timeout`), then stop."""
        self._queue.put(None)
        self._thread.join(timeout)
        self._stopping.set()

    def _loop(self) -> None:
        done = False
        while not done:
            first = self._queue.get()
            if first is None:
                return
            pending, done = [first], False
            deadline = time.monotonic() + self._flush_interval
            while len(pending) < self._batch_size:
                try:
                    item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if item is None:
                    done = True
                    break
                pending.append(item)
            batch: list[Item] = []
            for run, end in pending:
                if isinstance(end, ChildCrash):
                    self._record_crash(run, end.crash)
                else:
                    batch.append((run, end))
            if batch:
                self._flush(batch)

    def _flush(self, batch: list[Item]) -> None:
        """Save a batch. A database that cannot be reached is waited out while the leases
        hold; any other failure is the data's, not the database's, so the batch is split
        and saved item by item, and an item that still fails is given up (its lease then
        runs out and the reaper closes the attempt), never retried forever."""
        attempt = 0
        while batch:
            batch = self._still_trusted(batch)
            if not batch:
                return
            try:
                lost = set(self._store.finish([finish for _, finish in batch]))
            except StoreUnavailable as exc:
                delay = RETRY_BACKOFF[min(attempt, len(RETRY_BACKOFF) - 1)]
                attempt += 1
                events.emit(
                    events.COMPLETION_RETRY,
                    logging.WARNING,
                    worker_id=self._worker_id,
                    jobs=len(batch),
                    attempt=attempt,
                    error=str(exc),
                )
                if self._stopping.wait(delay):
                    return
                continue
            except Exception as exc:  # noqa: BLE001 - isolate the item the database refuses
                if len(batch) > 1:
                    for item in batch:
                        self._flush([item])
                    return
                run, _ = batch[0]
                self._ledger.lose(run, f"result not saved: the database refused it ({exc})")
                return
            self.batches += 1
            for run, finish in batch:
                if finish.lease in lost:
                    self._ledger.lose(run, "result refused: the job was reclaimed")
                else:
                    self._ledger.saved(run)
                    report_saved(run, finish, self._worker_id)
            return

    def _still_trusted(self, batch: list[Item]) -> list[Item]:
        """Drop (and report) attempts whose lease is lost or no longer trusted."""
        now = time.monotonic()
        kept = []
        for run, finish in batch:
            if run.lost:
                self._ledger.lose(run, "result not saved: the lease was lost")
            elif run.trusted_until <= now:
                self._ledger.lose(run, "result not saved: the lease could not be renewed in time")
            else:
                kept.append((run, finish))
        return kept

    def _record_crash(self, run: RunningJob, crash: dict[str, Any]) -> None:
        """Close the attempt of a child process that died as crashed, at once."""
        crash = dict(crash, worker_id=self._worker_id)
        try:
            reclaimed = self._store.crash_attempt(run.job.lease, crash, DetectedBy.CHILD_EXIT)
        except Exception as exc:  # noqa: BLE001 - the lease will expire; the reaper finishes
            self._ledger.drop(run)
            events.emit(
                events.JOB_CRASHED,
                logging.ERROR,
                job_id=run.job.id,
                worker_id=self._worker_id,
                error=f"could not record the crash ({exc}); the reaper will",
            )
            return
        self._ledger.drop(run)
        events.emit(
            events.JOB_CRASHED,
            logging.WARNING,
            job_id=run.job.id,
            task=run.job.task,
            attempt=run.job.attempt,
            worker_id=self._worker_id,
            reason=crash.get("reason"),
            signal=crash.get("signal"),
            exit_code=crash.get("exit_code"),
        )
        if reclaimed is not None:
            report_reclaimed([reclaimed], DetectedBy.CHILD_EXIT)


def report_saved(run: RunningJob, finish: Finish, worker_id: str) -> None:
    """Log what a saved outcome means for its job."""
    fields: dict[str, Any] = {
        "job_id": run.job.id,
        "task": run.job.task,
        "queue": run.job.queue,
        "attempt": run.job.attempt,
        "worker_id": worker_id,
        "duration": round(run.elapsed, 6),
    }
    if finish.status is JobStatus.SUCCEEDED:
        events.emit(events.JOB_SUCCEEDED, logging.DEBUG, **fields)
        return
    if finish.status is JobStatus.CANCELLED:
        events.emit(events.JOB_CANCELLED, **fields)
        return
    error = outcomes.error_summary(finish.error)
    if finish.outcome is Outcome.TIMED_OUT:
        events.emit(events.JOB_TIMED_OUT, logging.WARNING, **fields, error=error)
    else:
        events.emit(events.JOB_FAILED, logging.WARNING, **fields, error=error)
    if finish.status is JobStatus.QUEUED:
        events.emit(events.JOB_RETRY_SCHEDULED, **fields, retry_in=round(finish.retry_delay, 3))
    else:
        events.emit(events.JOB_DEAD, logging.WARNING, **fields, reason=finish.dead_reason)
