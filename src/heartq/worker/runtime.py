"""The worker: claims jobs, runs them on a pool, keeps their leases, saves their outcomes.

Threads of one worker process:

- main: the fetch loop. It claims up to the free slots in one statement (backpressure:
  never more than it can run), then sleeps until a slot frees up, an enqueue wakes it
  (its own process, or PostgreSQL's NOTIFY), or the poll interval passes.
- supervisor: wakes at the earliest deadline of any running attempt: hard timeouts,
  cancel grace periods, and self-fencing (an attempt whose lease could not be renewed
  within the trust window is stopped and never reported). Apart from the fetch loop, so
  a claim waiting on a locked database cannot delay it.
- heartbeat: one statement per tick for the worker row and all its leases.
- completer: saves finished attempts in fenced batches.
- maintenance: reaper, worker monitor, liveness probe, pruner.
- the pool's threads, event loop or child processes.

Startup: take the liveness lock, register, reclaim what earlier workers with the same
`name` still hold. Shutdown (SIGTERM/SIGINT, or `request_stop()`): stop claiming, let
running attempts finish within `shutdown_timeout`, release the rest (no attempt counted),
mark the worker stopped. A second signal skips the wait.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence
from types import FrameType
from typing import Any

from heartq import events, outcomes
from heartq.app import App
from heartq.config import DEFAULT_CONCURRENCY
from heartq.ids import new_worker_id
from heartq.maintenance.reconcile import reconcile
from heartq.maintenance.services import (
    MaintenanceRunner,
    default_services,
    report_reclaimed,
)
from heartq.store.interface import (
    DetectedBy,
    Finish,
    JobStatus,
    Lease,
    Outcome,
    WorkerInfo,
)
from heartq.worker.attempt import AttemptEnd, EndKind, RunningJob
from heartq.worker.completer import Completer
from heartq.worker.heartbeat import Heartbeater
from heartq.worker.liveness import liveness_reporter
from heartq.worker.pools import POOL_NAMES, AsyncPool, Pool, ThreadPool

MAX_CANCEL_GRACE = 5.0
"""A cancelled attempt gets at most 5 s (or one heartbeat interval) to stop by itself."""
CLAIM_RETRY_DELAY = 1.0
"""After a failed claim (database unreachable), wait this long before the next one."""
MIN_WAIT = 0.005
GIL_SWITCH_INTERVAL = 0.001
"""A worker asks CPython to hand the GIL over every 1 ms at most (the default is 5 ms):
a thread waiting on I/O that must get the GIL back after every call into the database
otherwise waits a whole interval each time behind a CPU-bound task thread (the convoy
effect). Measured on SQLite beside one busy thread: a heartbeat took 52 ms at 5 ms and
11 ms at 1 ms (0.4 ms idle), so a CPU-bound task could make its own lease lapse at short
lease settings. The cost for CPU-bound tasks is a few more thread switches."""


def locate_app(app: App) -> str:
    """`module:attribute` under which `app` can be imported (the process pool needs it)."""
    modules = {task.fn.__module__ for task in app.tasks.values()}
    for module_name in sorted(modules):
        module = sys.modules.get(module_name)
        for attr, value in vars(module).items() if module else ():
            if value is app:
                if module_name == "__main__":
                    raise ValueError(
                        "the process pool cannot import an app defined in __main__: move it "
                        "into a module and run `heartq worker module:app`"
                    )
                return f"{module_name}:{attr}"
    raise ValueError("cannot tell which module defines this app; pass app_ref='module:attr'")


class Worker:
    """A worker process's runtime. `run()` blocks until the worker has stopped."""

    def __init__(
        self,
        app: App,
        *,
        queues: Sequence[str] | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
        pool: str = "thread",
        name: str | None = None,
        app_ref: str | None = None,
        **settings: Any,
    ) -> None:
        if pool not in POOL_NAMES:
            raise ValueError(f"pool must be one of {', '.join(POOL_NAMES)}, got {pool!r}")
        if not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be a positive integer, got {concurrency!r}")
        self.app = app
        self.settings = app.settings.with_overrides(**settings)
        self.store = app.store
        self.id = new_worker_id()
        self.name = name
        self.queues = tuple(queues or sorted({t.queue for t in app.tasks.values()} or {"default"}))
        self.concurrency = concurrency
        self.pool_name = pool
        self._app_ref = app_ref
        self._runs: dict[Lease, RunningJob] = {}
        self._abandoned: dict[Lease, RunningJob] = {}
        self._executing = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop_requested = threading.Event()
        self._force_stop = threading.Event()
        self._stopped = threading.Event()
        self._signals = 0
        self.started = threading.Event()
        s = self.settings
        self.heartbeater = Heartbeater(
            self.store,
            self.id,
            interval=s.heartbeat_interval,
            lease=s.lease_seconds,
            trust_window=s.trust_window,
            runs=self._held_runs,
            on_lost=self._lose,
            on_cancel=self._cancel_requested,
            after_success=self._give_back_abandoned,
        )
        self.completer = Completer(self.store, self.id, on_saved=self._saved, on_lost=self._lose)
        self.maintenance = MaintenanceRunner(default_services(self.store, s), self.id)
        self._pool: Pool | None = None
        self._liveness: Any = None
        self._listener: Any = None
        self._supervisor = threading.Thread(
            target=self._supervise_loop, name="heartq-supervisor", daemon=True
        )
        self._supervisor_wake = threading.Event()
        self._supervisor_stop = threading.Event()

    # -- public control ----------------------------------------------------------------
    def request_stop(self, force: bool = False) -> None:
        """Begin a graceful shutdown; with `force`, release running jobs without waiting."""
        if force:
            self._force_stop.set()
        if not self._stop_requested.is_set():
            events.emit(events.SHUTDOWN_REQUESTED, worker_id=self.id, force=force)
        self._stop_requested.set()
        self._wake.set()

    def install_signal_handlers(self) -> None:
        """First SIGTERM/SIGINT: graceful stop. Second: stop at once."""

        def handle(signum: int, frame: FrameType | None) -> None:
            self._signals += 1
            self.request_stop(force=self._signals > 1)

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)

    @property
    def running_jobs(self) -> list[RunningJob]:
        with self._lock:
            return list(self._runs.values())

    # -- the main loop -----------------------------------------------------------------
    def run(self, burst: bool = False) -> None:
        """Work until stopped; with `burst`, stop as soon as the queue is empty and idle."""
        try:
            self._startup()
        except BaseException:
            self._abort_startup()
            raise
        try:
            while not self._stop_requested.is_set():
                claimed, full = self._claim()
                if full:
                    continue
                if burst and claimed == 0 and not self.running_jobs:
                    break
                self._wake.wait(self.settings.poll_interval)
                self._wake.clear()
        finally:
            self._shutdown()

    def _abort_startup(self) -> None:
        """Undo what a failed `_startup` began: no thread, lock or registry row outlives it."""
        self._stop_requested.set()
        for stop in (self.heartbeater.stop, self.maintenance.stop):
            with contextlib.suppress(Exception):
                stop()
        with contextlib.suppress(Exception):
            self.completer.stop(timeout=1.0)
        self._supervisor_stop.set()
        self._supervisor_wake.set()
        for handle in (self._listener, self._liveness):
            if handle is not None:
                with contextlib.suppress(Exception):
                    handle.release()
        if self._pool is not None:
            with contextlib.suppress(Exception):
                self._pool.close()
        with contextlib.suppress(Exception):
            self.store.stop_worker(self.id)
        self.app._unsubscribe_wakeup(self._wake)

    def _supervise_loop(self) -> None:
        """Its own thread, so a claim stuck on a locked database cannot delay a timeout
        or self-fencing: it wakes at the earliest deadline of any running attempt."""
        while not self._supervisor_stop.is_set():
            try:
                self._supervise()
            except Exception as exc:  # noqa: BLE001 - supervision must outlive any bug
                events.emit(
                    events.MAINTENANCE_FAILED,
                    logging.ERROR,
                    service="supervisor",
                    worker_id=self.id,
                    error=repr(exc),
                )
            self._supervisor_wake.wait(self._wait_time())
            self._supervisor_wake.clear()

    def _startup(self) -> None:
        s = self.settings
        sys.setswitchinterval(min(sys.getswitchinterval(), GIL_SWITCH_INTERVAL))
        self.store.migrate()
        self._liveness = self.store.liveness_hold(self.id, liveness_reporter(self.id))
        self.store.register_worker(
            WorkerInfo(
                id=self.id,
                name=self.name,
                hostname=socket.gethostname(),
                pid=os.getpid(),
                queues=self.queues,
                concurrency=self.concurrency,
                stale_after=s.stale_after_seconds,  # observers judge this worker by its own
            )
        )
        self._pool = self._make_pool()
        events.emit(
            events.WORKER_STARTED,
            worker_id=self.id,
            name=self.name,
            queues=list(self.queues),
            concurrency=self.concurrency,
            pool=self.pool_name,
            url=self.store.url,
            heartbeat_interval=s.heartbeat_interval,
            lease=s.lease_seconds,
            reap_interval=s.reap_interval_seconds,
        )
        if self.name:
            self._reconcile(self.name)
        self._supervisor.start()
        self.heartbeater.start()
        self.completer.start()
        self.maintenance.start()
        self.app._subscribe_wakeup(self._wake)
        if self.store.supports_notify:
            self._listener = self.store.listen(self._wake.set)
        self.started.set()

    def _make_pool(self) -> Pool:
        limit = self.settings.max_payload_bytes
        if self.pool_name == "async":
            return AsyncPool(self.id, limit)
        if self.pool_name == "process":
            from heartq.worker.process_pool import ProcessPool

            return ProcessPool(self.id, self._app_ref or locate_app(self.app), limit)
        return ThreadPool(self.id, limit)

    def _reconcile(self, name: str) -> None:
        reconcile(self.store, name, self.id, self.settings.stale_after_seconds)

    def _claim(self) -> tuple[int, bool]:
        """Claim up to the free slots. Returns (claimed, whether every slot was filled)."""
        with self._lock:
            free = self.concurrency - self._executing
        if free <= 0:
            return 0, False
        sent_at = time.monotonic()
        try:
            jobs = self.store.claim(self.id, self.queues, free, self.settings.lease_seconds)
        except Exception as exc:  # noqa: BLE001 - the database may blip; try again soon
            events.emit(events.CLAIM_FAILED, logging.WARNING, worker_id=self.id, error=str(exc))
            self._stop_requested.wait(CLAIM_RETRY_DELAY)
            return 0, False
        for job in jobs:
            run = RunningJob(
                job,
                self.app.tasks.get(job.task),
                self.store,
                claim_sent_at=sent_at,
                trust_window=self.settings.trust_window,
                max_payload_bytes=self.settings.max_payload_bytes,
            )
            assert self._pool is not None
            run.on_flags_changed = self._pool.notify
            with self._lock:
                self._runs[job.lease] = run
                self._executing += 1
            events.emit(
                events.JOB_CLAIMED,
                job_id=job.id,
                task=job.task,
                queue=job.queue,
                attempt=job.attempt,
                execution_id=job.execution_id,
                worker_id=self.id,
                latency=max(0.0, job.lease_expires_at - self.settings.lease_seconds - job.run_at),
            )
            self._pool.start(run, self._ended)
        if jobs:
            self._supervisor_wake.set()  # new deadlines may come before its next wake-up
        return len(jobs), len(jobs) == free

    def _wait_time(self) -> float:
        wait = self.settings.poll_interval
        now = time.monotonic()
        for run in self.running_jobs:
            if run.ended is None:
                for moment in (run.trusted_until, run.deadline, run.cancel_deadline):
                    if moment is not None:
                        wait = min(wait, moment - now)
        return max(MIN_WAIT, wait)

    # -- supervision -------------------------------------------------------------------
    def _supervise(self) -> None:
        now = time.monotonic()
        untrusted = []
        for run in self.running_jobs:
            if run.ended is not None:
                continue
            if run.trusted_until <= now:
                if run.is_silent(now):
                    error = f"task silent for over {run.heartbeat_timeout:g} s (heartbeat_timeout)"
                else:
                    untrusted.append(run)
                    error = "lease not renewed in time"
                    with self._lock:
                        self._abandoned[run.job.lease] = run
                self._force(run, AttemptEnd(EndKind.LOST, error=error))
            elif run.deadline is not None and now >= run.deadline:
                timeout = run.task.timeout if run.task else None
                self._force(
                    run, AttemptEnd(EndKind.TIMED_OUT, error=f"timed out after {timeout:g} s")
                )
            elif run.cancel_deadline is not None and now >= run.cancel_deadline:
                self._force(run, AttemptEnd(EndKind.CANCELLED, error="cancelled (forced)"))
        if untrusted:
            last = self.heartbeater.last_success
            events.emit(
                events.LEASES_UNTRUSTED,
                logging.ERROR,
                worker_id=self.id,
                job_ids=[r.job.id for r in untrusted],
                since_last_renewal=None if last is None else round(now - last, 3),
                trust_window=self.settings.trust_window,
            )

    def _force(self, run: RunningJob, end: AttemptEnd) -> None:
        """Decide an attempt's end without waiting for its code, then stop the code.

        The end is recorded first: telling the code (the flags notify its pool, which may
        cancel it on another thread) makes it end too, and that later end must be stale."""
        self._ended(run, end)
        if end.kind is EndKind.CANCELLED:
            run.mark_cancel_requested()
        elif end.kind is EndKind.LOST:
            run.mark_lost()  # ctx.heartbeat() raises LeaseLost; nothing will be reported
        else:
            run.mark_stopping()  # ctx.cancelled turns True; the outcome is still saved
        assert self._pool is not None
        self._pool.stop(run)

    def _cancel_requested(self, run: RunningJob) -> None:
        if run.cancel_requested:
            return
        grace = min(MAX_CANCEL_GRACE, self.settings.heartbeat_interval)
        run.cancel_deadline = time.monotonic() + grace
        run.mark_cancel_requested()
        events.emit(events.JOB_CANCEL_REQUESTED, job_id=run.job.id, worker_id=self.id)
        self._supervisor_wake.set()

    def _held_runs(self) -> list[RunningJob]:
        return [run for run in self.running_jobs if not run.lost]

    # -- ends, saves, losses -----------------------------------------------------------
    def _ended(self, run: RunningJob, end: AttemptEnd) -> None:
        """Called once per attempt by its pool, or by `_force`; later calls are stale."""
        if not run.end(end):
            return
        # Hand the outcome over before freeing the slot: a shutdown that sees no attempt
        # executing must find every outcome already in the completer's queue.
        if end.kind is EndKind.LOST:
            self._lose(run, end.error or "lease lost")
        elif end.kind is EndKind.RELEASED:
            pass  # shutdown releases these together
        elif end.kind is EndKind.CRASHED:
            self._crashed(run, end)
        else:
            self.completer.submit(run, self._finish_for(run, end))
        with self._lock:
            self._executing -= 1
        self._wake.set()

    def _finish_for(self, run: RunningJob, end: AttemptEnd) -> Finish:
        job = run.job
        kind = end.kind
        if kind is EndKind.FAILED and run.cancel_requested:
            kind = EndKind.CANCELLED
        if kind is EndKind.SUCCEEDED:
            return outcomes.succeeded(job, end.result_json)
        if kind is EndKind.CANCELLED:
            return outcomes.cancelled(job, end.error)
        outcome = Outcome.TIMED_OUT if kind is EndKind.TIMED_OUT else Outcome.FAILED
        return outcomes.failed(job, outcome, end.error or "failed", permanent=end.permanent)

    def _crashed(self, run: RunningJob, end: AttemptEnd) -> None:
        crash = dict(end.crash or {}, worker_id=self.id)
        try:
            reclaimed = self.store.crash_attempt(run.job.lease, crash, DetectedBy.CHILD_EXIT)
        except Exception as exc:  # noqa: BLE001 - the lease will expire; the reaper finishes
            events.emit(
                events.JOB_CRASHED,
                logging.ERROR,
                job_id=run.job.id,
                worker_id=self.id,
                error=f"could not record the crash ({exc}); the reaper will",
            )
            self._drop(run)
            return
        self._drop(run)
        events.emit(
            events.JOB_CRASHED,
            logging.WARNING,
            job_id=run.job.id,
            task=run.job.task,
            attempt=run.job.attempt,
            worker_id=self.id,
            reason=crash.get("reason"),
            signal=crash.get("signal"),
            exit_code=crash.get("exit_code"),
        )
        if reclaimed is not None:
            report_reclaimed([reclaimed], DetectedBy.CHILD_EXIT)

    def _drop(self, run: RunningJob) -> bool:
        with self._lock:
            return self._runs.pop(run.job.lease, None) is not None

    def _lose(self, run: RunningJob, reason: str) -> None:
        run.mark_lost()
        if run.ended is None:
            self._force(run, AttemptEnd(EndKind.LOST, error=reason))
            return
        if not self._drop(run):
            return  # already reported
        events.emit(
            events.LEASE_LOST,
            logging.WARNING,
            job_id=run.job.id,
            execution_id=run.job.execution_id,
            worker_id=self.id,
            reason=reason,
        )

    def _give_back_abandoned(self) -> None:
        """Once the database answers again, close the attempts this worker stopped
        trusting, so their jobs need not wait for their leases (which a heartbeat sent
        before the outage may even have renewed) to run out."""
        with self._lock:
            abandoned = list(self._abandoned.values())
        for run in abandoned:
            crash = {"reason": "its worker could not renew the lease in time and gave it up"}
            try:
                reclaimed = self.store.crash_attempt(run.job.lease, crash, DetectedBy.SELF_FENCE)
            except Exception:  # noqa: BLE001 - try again after the next good heartbeat
                return
            with self._lock:
                self._abandoned.pop(run.job.lease, None)
            if reclaimed is not None:
                report_reclaimed([reclaimed], DetectedBy.SELF_FENCE)

    def _saved(self, run: RunningJob, finish: Finish) -> None:
        self._drop(run)
        fields: dict[str, Any] = {
            "job_id": run.job.id,
            "task": run.job.task,
            "queue": run.job.queue,
            "attempt": run.job.attempt,
            "worker_id": self.id,
            "duration": round(run.elapsed, 6),
        }
        if finish.status is JobStatus.SUCCEEDED:
            events.emit(events.JOB_SUCCEEDED, **fields)
            return
        if finish.status is JobStatus.CANCELLED:
            events.emit(events.JOB_CANCELLED, **fields)
            return
        error = outcomes._first_line(finish.error)
        if finish.outcome is Outcome.TIMED_OUT:
            events.emit(events.JOB_TIMED_OUT, logging.WARNING, **fields, error=error)
        else:
            events.emit(events.JOB_FAILED, logging.WARNING, **fields, error=error)
        if finish.status is JobStatus.QUEUED:
            events.emit(events.JOB_RETRY_SCHEDULED, **fields, retry_in=round(finish.retry_delay, 3))
        else:
            events.emit(events.JOB_DEAD, logging.WARNING, **fields, reason=finish.dead_reason)

    # -- shutdown ----------------------------------------------------------------------
    def _shutdown(self) -> None:
        self.app._unsubscribe_wakeup(self._wake)
        if self._listener is not None:
            self._listener.release()
        deadline = time.monotonic() + self.settings.shutdown_timeout
        while not self._force_stop.is_set() and time.monotonic() < deadline:
            with self._lock:
                if self._executing == 0:
                    break
            self._wake.wait(min(0.05, max(0.0, deadline - time.monotonic())))
            self._wake.clear()
        leftover = [run for run in self.running_jobs if run.ended is None]
        for run in leftover:
            self._force(run, AttemptEnd(EndKind.RELEASED))
        self.completer.stop(timeout=max(1.0, self.settings.trust_window))
        self._release(leftover)
        self.heartbeater.stop()
        self.maintenance.stop()
        self._supervisor_stop.set()
        self._supervisor_wake.set()
        self._supervisor.join(timeout=5)
        if self._pool is not None:
            self._pool.close()
        try:
            self.store.stop_worker(self.id)
        except Exception as exc:  # noqa: BLE001 - the monitor will mark it inactive
            events.emit(events.WORKER_STOPPED, logging.WARNING, worker_id=self.id, error=str(exc))
        if self._liveness is not None:
            self._liveness.release()
        events.emit(events.WORKER_STOPPED, worker_id=self.id, released=len(leftover))
        self._stopped.set()

    def _release(self, runs: list[RunningJob]) -> None:
        released = [run for run in runs if run.ended and run.ended.kind is EndKind.RELEASED]
        if not released:
            return
        try:
            lost = set(self.store.release([run.job.lease for run in released]))
        except Exception as exc:  # noqa: BLE001 - their leases expire; the reaper requeues
            events.emit(
                events.JOB_RELEASED,
                logging.WARNING,
                worker_id=self.id,
                error=f"could not release ({exc}); leases will expire instead",
                job_ids=[run.job.id for run in released],
            )
            return
        for run in released:
            self._drop(run)
            if run.job.lease not in lost:
                events.emit(events.JOB_RELEASED, job_id=run.job.id, worker_id=self.id)
