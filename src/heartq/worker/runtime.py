"""The worker: claims jobs, runs them on a pool, keeps their leases, saves their outcomes.

Threads of one worker process, each with one job; they share the running attempts
through the ledger (`ledger.py`), never by calling each other:

- main: the fetch loop. It claims up to the free slots in one statement (backpressure:
  never more than it can run), then sleeps until a slot frees up, an enqueue wakes it
  (its own process, or PostgreSQL's NOTIFY), or the poll interval passes.
- supervisor (`supervisor.py`): wakes at the earliest deadline of any running attempt:
  hard timeouts, cancel grace periods, and self-fencing (an attempt whose lease could not
  be renewed within the trust window is stopped and never reported). Apart from the
  fetch loop, so a claim waiting on a locked database cannot delay it.
- heartbeat (`heartbeat.py`): one statement per tick for the worker row and all its
  leases.
- completer (`completer.py`): saves ended attempts in fenced batches.
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

from heartq import events
from heartq.app import App
from heartq.config import DEFAULT_CONCURRENCY
from heartq.ids import new_worker_id
from heartq.maintenance.reconcile import reconcile
from heartq.maintenance.services import MaintenanceRunner, default_services
from heartq.store.interface import LivenessHandle, WorkerInfo
from heartq.worker.attempt import AttemptEnd, EndKind, RunningJob
from heartq.worker.completer import Completer
from heartq.worker.heartbeat import Heartbeater
from heartq.worker.ledger import Ledger, Pool
from heartq.worker.liveness import liveness_reporter
from heartq.worker.pools import POOL_NAMES, AsyncPool, ThreadPool
from heartq.worker.supervisor import Supervisor

MAX_CANCEL_GRACE = 5.0
"""A cancelled attempt gets at most 5 s (or one heartbeat interval) to stop by itself."""
CLAIM_RETRY_DELAY = 1.0
"""After a failed claim (database unreachable), wait this long before the next one."""
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
        self.settings = s = app.settings.with_overrides(**settings)
        self.store = app.store
        self.id = new_worker_id()
        self.name = name
        self.queues = tuple(queues or sorted({t.queue for t in app.tasks.values()} or {"default"}))
        self.concurrency = concurrency
        self.pool_name = pool
        self._app_ref = app_ref
        self.ledger = Ledger(self.id, concurrency)
        self._wake = self.ledger.slot_freed  # also set by enqueues and NOTIFY
        self._stop_requested = threading.Event()
        self._force_stop = threading.Event()
        self._signals = 0
        self.started = threading.Event()
        self.heartbeater = Heartbeater(
            self.store,
            self.ledger,
            interval=s.heartbeat_interval,
            lease=s.lease_seconds,
            trust_window=s.trust_window,
            cancel_grace=min(MAX_CANCEL_GRACE, s.heartbeat_interval),
        )
        self.completer = Completer(self.store, self.ledger)
        self.supervisor = Supervisor(
            self.ledger, idle_wait=s.poll_interval, trust_window=s.trust_window
        )
        self.maintenance = MaintenanceRunner(
            default_services(self.store, s), self.id, found_work=self._wake
        )
        self._liveness: LivenessHandle | None = None
        self._listener: LivenessHandle | None = None

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
        return self.ledger.running()

    @property
    def last_renewal(self) -> float | None:
        """When the last heartbeat the database answered was sent (monotonic clock)."""
        return self.ledger.last_renewal

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
                if burst and claimed == 0 and not self.ledger.running():
                    break
                self._wake.wait(self.settings.poll_interval)
                self._wake.clear()
        finally:
            self._shutdown()

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
        self.ledger.pool = self._make_pool()
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
            reconcile(self.store, self.name, self.id, s.stale_after_seconds)
        for part in (self.supervisor, self.heartbeater, self.completer, self.maintenance):
            part.start()
        self.app.subscribe_wakeup(self._wake)
        if self.store.supports_notify:
            self._listener = self.store.listen(self._wake.set)
        self.started.set()

    def _abort_startup(self) -> None:
        """Undo what a failed `_startup` began: no thread, lock or registry row outlives it."""
        self._stop_requested.set()
        for stop in (self.heartbeater.stop, self.maintenance.stop, self.supervisor.stop):
            with contextlib.suppress(Exception):
                stop()
        with contextlib.suppress(Exception):
            self.completer.stop(timeout=1.0)
        for handle in (self._listener, self._liveness):
            if handle is not None:
                with contextlib.suppress(Exception):
                    handle.release()
        if self.ledger.pool is not None:
            with contextlib.suppress(Exception):
                self.ledger.pool.close()
        with contextlib.suppress(Exception):
            self.store.stop_worker(self.id)
        self.app.unsubscribe_wakeup(self._wake)

    def _make_pool(self) -> Pool:
        limit = self.settings.max_payload_bytes
        if self.pool_name == "async":
            return AsyncPool(self.ledger, limit)
        if self.pool_name == "process":
            from heartq.worker.process_pool import ProcessPool

            return ProcessPool(self.ledger, self._app_ref or locate_app(self.app), limit)
        return ThreadPool(self.ledger, limit)

    def _claim(self) -> tuple[int, bool]:
        """Claim up to the free slots. Returns (claimed, whether every slot was filled)."""
        free = self.ledger.free_slots()
        if free <= 0:
            return 0, False
        s = self.settings
        sent_at = time.monotonic()
        try:
            jobs = self.store.claim(self.id, self.queues, free, s.lease_seconds)
        except Exception as exc:  # noqa: BLE001 - the database may blip; try again soon
            events.emit(events.CLAIM_FAILED, logging.WARNING, worker_id=self.id, error=str(exc))
            self._stop_requested.wait(CLAIM_RETRY_DELAY)
            return 0, False
        pool = self.ledger.pool
        assert pool is not None
        for job in jobs:
            run = RunningJob(
                job,
                self.app.tasks.get(job.task),
                self.store,
                claim_sent_at=sent_at,
                trust_window=s.trust_window,
                max_payload_bytes=s.max_payload_bytes,
            )
            self.ledger.claimed(run)
            events.emit(
                events.JOB_CLAIMED,
                logging.DEBUG,
                job_id=job.id,
                task=job.task,
                queue=job.queue,
                attempt=job.attempt,
                execution_id=job.execution_id,
                worker_id=self.id,
                latency=max(0.0, job.lease_expires_at - s.lease_seconds - job.run_at),
            )
            pool.start(run)
        return len(jobs), len(jobs) == free

    # -- shutdown ----------------------------------------------------------------------
    def _shutdown(self) -> None:
        self.app.unsubscribe_wakeup(self._wake)
        if self._listener is not None:
            self._listener.release()
        self._wait_for_running()
        leftover = [run for run in self.ledger.running() if run.ended is None]
        for run in leftover:
            self.ledger.force(run, AttemptEnd(EndKind.RELEASED))
        self.completer.stop(timeout=max(1.0, self.settings.trust_window))
        self._release(leftover)
        self.heartbeater.stop()
        self.maintenance.stop()
        self.supervisor.stop()
        if self.ledger.pool is not None:
            self.ledger.pool.close()
        try:
            self.store.stop_worker(self.id)
        except Exception as exc:  # noqa: BLE001 - the monitor will mark it inactive
            events.emit(events.WORKER_STOPPED, logging.WARNING, worker_id=self.id, error=str(exc))
        if self._liveness is not None:
            self._liveness.release()
        events.emit(events.WORKER_STOPPED, worker_id=self.id, released=len(leftover))

    def _wait_for_running(self) -> None:
        """Let running attempts finish, for up to `shutdown_timeout` (not after a second
        signal)."""
        deadline = time.monotonic() + self.settings.shutdown_timeout
        while not self._force_stop.is_set() and time.monotonic() < deadline:
            if self.ledger.executing() == 0:
                return
            self._wake.wait(min(0.05, max(0.0, deadline - time.monotonic())))
            self._wake.clear()

    def _release(self, runs: list[RunningJob]) -> None:
        """Give the jobs stopped by the shutdown back to the queue, no attempt counted."""
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
            self.ledger.drop(run)
            if run.job.lease not in lost:
                events.emit(events.JOB_RELEASED, job_id=run.job.id, worker_id=self.id)
