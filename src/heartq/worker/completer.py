"""The completer: saves finished attempts in batches, one fenced statement per batch.

Ended attempts queue up in the ledger (`Ledger.outcomes`); the completer flushes every
`flush_interval` (a few milliseconds) or every `batch_size` attempts. An outcome counts
as saved only once that commit returned. If the database cannot be reached or written
(down, a full disk, a read-only or deleted SQLite file), the batch is retried with
backoff until it lands or the worker stops: the job stays `running` under this worker,
whose heartbeats keep its lease while they land. Saving late is safe whatever happened
meanwhile, because the write is fenced: if the lease ran out and another worker took the
job, the write changes nothing and the attempt is reported lost. So an outcome is never
thrown away for want of a database; at shutdown the worker retries until its deadline
and, if outcomes are still unsaved, leaves itself `active` for the next worker's liveness
probe (`runtime.py`). An attempt whose child process died is recorded as crashed at once
(`Store.crash_attempt`, `detected_by=child_exit`), retried the same way.

Events: `job_succeeded`, `job_cancelled`, `job_failed`, `job_timed_out`,
`job_retry_scheduled`, `job_dead`, `job_crashed`, `completion_retry`.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from heartq import events, lost_results
from heartq.errors import StoreUnavailable
from heartq.lifecycle import fate
from heartq.lifecycle.fate import AttemptEnd, CrashedEnd, error_summary, is_expiry
from heartq.model import DetectedBy, Finish, JobStatus, Outcome, PulseReport
from heartq.store.interface import LeaseHolder
from heartq.worker.attempt import RunningJob
from heartq.worker.ledger import EndedAttempt, Ledger
from heartq.worker.store_health import StoreHealth

DEFAULT_FLUSH_INTERVAL = 0.005
"""Defaults to 5 ms: how long the completer gathers finished jobs into one batch."""
DEFAULT_BATCH_SIZE = 200
"""Defaults to 200 attempts per batch."""
RETRY_BACKOFF = (0.05, 0.1, 0.25, 0.5, 1.0)

T = TypeVar("T")

_SUCCEEDED = JobStatus.SUCCEEDED
"""Read per saved job: a module name, not a read off the enum class (on Python 3.11 that
goes through `EnumType.__getattr__`'s hook, 0.1 to 0.25 us)."""
_QUEUED = JobStatus.QUEUED

Item = tuple[RunningJob, Finish]


class Completer:
    def __init__(
        self,
        store: LeaseHolder,
        ledger: Ledger,
        *,
        flush_interval: float = DEFAULT_FLUSH_INTERVAL,
        batch_size: int = DEFAULT_BATCH_SIZE,
        health: StoreHealth | None = None,
        on_retry: Callable[[float], None] | None = None,
    ) -> None:
        self._store = store
        self.events = ledger.events
        """The worker's events: each outcome saved, and a child's attempt it closed as
        crashed (its crash hooks too, run here: the child can run nothing more)."""
        self._health = health or StoreHealth(ledger.worker_id, ledger.events)
        self._on_retry = on_retry
        """Told of each retry it saved that waits out a backoff: in how many seconds it
        falls due (the fetch loop wakes then: `wakeups.py`)."""
        self._ledger = ledger
        self._worker_id = ledger.worker_id
        self._flush_interval = flush_interval
        self._batch_size = batch_size
        self._thread = threading.Thread(target=self._loop, name="heartq-completer", daemon=True)
        self._stopping = threading.Event()
        self.batches = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self, deadline: float, force: threading.Event | None = None) -> None:
        """Save what is queued, retrying until it landed, the `deadline` (monotonic) passed
        or `force` was set; then stop. What is left unsaved stays in the ledger."""
        self._ledger.outcomes.put(None)
        while self._thread.is_alive() and not (force is not None and force.is_set()):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._thread.join(min(left, 0.05))
        self._stopping.set()
        self._thread.join(1.0)

    def _loop(self) -> None:
        done = False
        while not done:
            first = self._ledger.outcomes.get()
            if first is None:
                return
            pending = [first]
            done = self._gather(pending)
            batch: list[Item] = []
            for run, end in pending:
                if isinstance(end, Finish):
                    batch.append((run, end))
                elif isinstance(end, CrashedEnd):
                    self._record_crash(run, end.end.crash or {})
                else:  # a CommittedEnd
                    self._save_committed(run, end.end)
            if batch:
                self._flush(batch)

    def _gather(self, pending: list[EndedAttempt]) -> bool:
        """Add to `pending` what else ends within `flush_interval` of its first item, up
        to `batch_size`. The completer sleeps through the interval and then takes what
        queued up, rather than waiting on the queue item by item: a wait woke it (and
        made it take the GIL) once per ended attempt. Returns whether the stop's sentinel
        came."""
        deadline = time.monotonic() + self._flush_interval
        outcomes = self._ledger.outcomes
        while True:
            while len(pending) < self._batch_size:
                try:
                    item = outcomes.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    return True
                pending.append(item)
            left = deadline - time.monotonic()
            if len(pending) >= self._batch_size or left <= 0:
                return False
            time.sleep(left)

    def _retrying(self, write: Callable[[], T], jobs: int) -> T | None:
        """`write()` until it lands; None if the completer was stopped first. Only a
        database that cannot be written is waited out; any other error is raised."""
        attempt = 0
        while True:
            began = time.monotonic()
            try:
                result = write()
            except StoreUnavailable as exc:
                delay = RETRY_BACKOFF[min(attempt, len(RETRY_BACKOFF) - 1)]
                attempt += 1
                self.events.emit(
                    events.COMPLETION_RETRY,
                    self._health.failed(exc, "completer"),
                    worker_id=self._worker_id,
                    jobs=jobs,
                    attempt=attempt,
                    error=str(exc),
                )
                if self._stopping.wait(delay):
                    return None
                continue
            self._health.succeeded("completer", began)
            return result

    def _flush(self, batch: list[Item]) -> None:
        """Save a batch. A database that cannot be written is waited out (see the module
        docstring); any other failure is the data's, not the database's, so the batch is
        split and saved item by item, and an item that still fails is given up (its lease
        then runs out and the lease reclaimer closes the attempt), never retried forever."""
        batch = self._still_held(batch)
        if not batch:
            return
        finishes = [finish for _, finish in batch]
        try:
            answer = self._retrying(lambda: self._store.finish(finishes), len(batch))
        except Exception as exc:  # noqa: BLE001 - isolate the item the database refuses
            if len(batch) > 1:
                for item in batch:
                    self._flush([item])
                return
            run, _ = batch[0]
            self._ledger.lose(run, f"result not saved: the database refused it ({exc})")
            return
        if answer is None:
            return  # stopped before it landed: the runs stay in the ledger, unsaved
        self.batches += 1
        if lost := set(answer):
            for run, finish in batch:
                if finish.lease in lost:
                    self._ledger.lose(run, "result refused: the job was reclaimed")
            batch = [(run, finish) for run, finish in batch if finish.lease not in lost]
        self._ledger.saved(run for run, _ in batch)
        debug = self.events.wanted(logging.DEBUG)
        for run, finish in batch:
            if debug or finish.status is not _SUCCEEDED:  # else nothing to log
                self._report_saved(run, finish, debug)
                self._retry_saved(finish)

    def _retry_saved(self, finish: Finish) -> None:
        """Tell `on_retry` of a retry that waits out a backoff (not a job given back for
        a worker that knows its task: another worker's to claim)."""
        if (
            finish.status is _QUEUED
            and finish.retry_delay > 0
            and not finish.waits_for_task
            and self._on_retry is not None
        ):
            self._on_retry(finish.retry_delay)

    def _save_committed(self, run: RunningJob, end: AttemptEnd) -> None:
        """A job its task completed in `ctx.transaction()`: nothing to save if the task
        handed its result to the commit; else save the result the code returned after
        (fenced on the job being succeeded under this execution, its result pending), or
        why it has none: the code failed after its transaction had committed the job."""
        lease = run.job.lease
        succeeded = end.outcome is Outcome.SUCCEEDED
        if run.result_committed:  # landed with the commit; what the code did after: not kept
            self._ledger.saved((run,))
        else:
            result = end.result_json if succeeded else None
            lost = None if succeeded else lost_results.failed_after_commit(
                end.outcome.value, error_summary(end.error)
            )  # fmt: skip
            saved = self._retrying(lambda: self._store.save_result(lease, result, lost), 1)
            if saved is None:
                return  # stopped before it landed: waiters stop waiting when its lease ends
            if not saved:  # its lease ran out first: readers were told its result is lost
                self._ledger.lose(run, "result refused: the lease ran out after the commit")
                return
            self._ledger.saved((run,))
        if succeeded:
            self._report_saved(run, fate.succeeded(run.job, end.result_json))
            return
        self.events.emit(
            events.JOB_ENDED_AFTER_COMMIT,
            logging.WARNING,
            job_id=run.job.id,
            task=run.job.task,
            worker_id=self._worker_id,
            ended=end.outcome.value,
            error=error_summary(end.error),
            result="committed" if run.result_committed else "lost",
        )

    def _still_held(self, batch: list[Item]) -> list[Item]:
        """Drop (and report) attempts whose lease is known lost. One whose lease merely
        could not be renewed is kept: its save is fenced, so trying costs nothing."""
        kept = []
        for run, finish in batch:
            if run.lost:
                self._ledger.lose(run, "result not saved: the lease was lost")
            else:
                kept.append((run, finish))
        return kept

    def _record_crash(self, run: RunningJob, crash: dict[str, Any]) -> None:
        """Close the attempt of a child process that died as crashed, at once, after
        storing what its task last reported (its last checkpoint is the next attempt's)."""
        crash = dict(crash, worker_id=self._worker_id)
        unwritten = run.unwritten_report()
        if unwritten is not None:
            with contextlib.suppress(Exception):  # best effort: the crash is what matters
                self._store.pulse([PulseReport(run.job.lease, unwritten[1])])
        try:
            landed = self._retrying(
                lambda: (self._store.crash_attempt(run.job.lease, crash, DetectedBy.CHILD_EXIT),),
                1,
            )
            if landed is None:
                return  # stopped first: the run stays in the ledger, unsaved
            reclaimed = landed[0]
        except Exception as exc:  # noqa: BLE001 - the lease will expire; the lease reclaimer finishes
            self._ledger.drop(run)
            self.events.emit(
                events.JOB_CRASHED,
                logging.ERROR,
                job_id=run.job.id,
                worker_id=self._worker_id,
                error=f"could not record the crash ({exc}); the lease reclaimer will",
            )
            return
        self._ledger.drop(run)
        self.events.emit(
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
            self.events.reclaimed([reclaimed], DetectedBy.CHILD_EXIT)
            if reclaimed.status is _QUEUED and reclaimed.retry_delay > 0 and self._on_retry:
                self._on_retry(reclaimed.retry_delay)
            self.events.crashed([reclaimed])

    def _report_saved(self, run: RunningJob, finish: Finish, debug: bool | None = None) -> None:
        """Tell what a saved outcome means for its job (a success at DEBUG only). `debug`:
        whether DEBUG events go anywhere, asked once for a batch (None: asked here)."""
        tell = self.events
        if finish.status is _SUCCEEDED and not (
            tell.wanted(logging.DEBUG) if debug is None else debug
        ):
            return
        fields: dict[str, Any] = {
            "job_id": run.job.id,
            "task": run.job.task,
            "queue": run.job.queue,
            "attempt": run.job.attempt,
            "execution_id": run.job.execution_id,
            "worker_id": self._worker_id,
            "duration": round(run.elapsed, 6),
        }
        if finish.status is JobStatus.SUCCEEDED:
            tell.emit(events.JOB_SUCCEEDED, logging.DEBUG, **fields)
            return
        if finish.status is JobStatus.CANCELLED:
            if is_expiry(finish):
                tell.emit(events.JOB_EXPIRED, logging.WARNING, **fields, reason=finish.error)
            else:
                tell.emit(events.JOB_CANCELLED, **fields)
            return
        if finish.outcome is Outcome.SNOOZED:  # too early, its task said: not counted
            tell.emit(
                events.JOB_SNOOZED,
                **fields,
                retry_in=round(finish.retry_delay, 3),
                snoozes=run.job.snoozes + 1,
                max_snoozes=run.job.max_snoozes,
                reason=finish.error,
            )
            return
        error = error_summary(finish.error)
        if finish.waits_for_task:  # its task is unknown here, declared elsewhere
            tell.emit(
                events.JOB_WAITING_FOR_TASK,
                logging.WARNING,
                **fields,
                error=error,
                retry_in=round(finish.retry_delay, 3),
            )
            return
        if finish.outcome is Outcome.TIMED_OUT:
            tell.emit(events.JOB_TIMED_OUT, logging.WARNING, **fields, error=error)
        else:
            tell.emit(events.JOB_FAILED, logging.WARNING, **fields, error=error)
        if finish.status is JobStatus.QUEUED:
            tell.emit(events.JOB_RETRY_SCHEDULED, **fields, retry_in=round(finish.retry_delay, 3))
        else:
            tell.emit(events.JOB_DEAD, logging.WARNING, **fields, reason=finish.dead_reason)
