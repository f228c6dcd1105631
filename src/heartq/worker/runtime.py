"""The worker: claims jobs, runs them on a pool, keeps their leases, saves their outcomes.

Threads of one worker process, each with one job; they share the running attempts
through the ledger (`ledger.py`), never by calling each other:

- main: the fetch loop. Each round fills the free slots (backpressure: never more than
  it can run) through the one fetch strategy chosen when the worker was built
  (`claimer.py`: a database claim; with `prefetch` N, from the buffer of jobs claimed
  ahead, whose start is recorded in the database first; or a transport's messages,
  `transport_fetch.py`), then sleeps until a slot frees up, an enqueue wakes it (its
  own process, or PostgreSQL's NOTIFY), or the poll interval passes (sooner when the
  claim said a job its rate limit held back may start before then, or when a job the
  worker knows of falls due: a retry it scheduled, a delayed job enqueued in its
  process or, on PostgreSQL, by any: `wakeups.py`).
- supervisor (`supervisor.py`): wakes at the earliest deadline of any running attempt:
  hard timeouts, cancel grace periods, and self-fencing (an attempt whose lease could not
  be renewed within the trust window is stopped and never reported). Apart from the
  fetch loop, so a claim waiting on a locked database cannot delay it.
- heartbeat (`heartbeat.py`): one statement per tick for the worker row and all its
  leases.
- pulse (`pulse.py`): about once a second, one statement for what every task reported
  (progress, checkpoints); cancel requests looked for (PostgreSQL: when NOTIFYed).
- completer (`completer.py`): saves ended attempts in fenced batches.
- maintenance (`heartq/maintenance/`): lease reclaimer, worker monitor, liveness probe, pruner,
  the scheduler of the app's and the queue's runtime periodic schedules, and with a
  transport its sweeper.
- signals (`signals.py`): acts on SIGTERM/SIGINT, which the handler only hands over
  (a handler running in the main thread must take no lock that thread may hold).
- the pool's threads, event loop or child processes.

Startup: wait for the database (`startup.py`: each step retried while the database is
down, full, starting up or locked; at once out on a refusal for good, a stop, or the
`startup_timeout`), take the liveness lock, register, reclaim what earlier workers with
the same `name` still hold. Shutdown (SIGTERM/SIGINT, or `request_stop()`): stop claiming, let
running attempts finish within `shutdown_timeout`, release the rest and every job
claimed ahead (no attempt counted), mark the worker stopped. A second signal skips the
wait.

A database that cannot be written at shutdown (a full disk, a read-only or deleted
SQLite file, a server down) does not make the worker walk away from its jobs: it keeps
retrying to save outcomes (`completer.py`) and release jobs (`hand_back.py`) until
`shutdown_timeout` after the signal (`shutdown_saving`). If it must exit with jobs
unsaved (the deadline, or a second signal), it does not mark itself `stopped`
(`shutdown_unsaved`): it stays `active` in the registry with its liveness lock gone, so
the next worker's liveness probe reclaims its jobs at once instead of after their
leases.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from heartq import events, payload
from heartq.app import App
from heartq.config import DEFAULT_CONCURRENCY
from heartq.hooks import WorkerHookInfo
from heartq.ids import new_worker_id
from heartq.lifecycle.fate import AttemptEnd
from heartq.maintenance.reconcile import PendingReconciliation, reconcile
from heartq.maintenance.runner import MaintenanceRunner, Service, default_services
from heartq.maintenance.scheduler import Scheduler
from heartq.maintenance.sweeper import Sweeper
from heartq.model import Outcome, Reclaimed, WorkerInfo
from heartq.store.link import LivenessHandle
from heartq.worker import tracing
from heartq.worker.attempt import RunningJob
from heartq.worker.claimer import ClaimAheadFetch, Claimer, ClaimFetch, Fetch
from heartq.worker.completer import Completer
from heartq.worker.controls import QueueControls
from heartq.worker.hand_back import HandBack
from heartq.worker.heartbeat import Heartbeater
from heartq.worker.ledger import ExecutionPool, Ledger
from heartq.worker.liveness_events import liveness_reporter
from heartq.worker.pools import MIB, POOL_NAMES, AsyncPool, ChildLimits, ThreadPool
from heartq.worker.pulse import Pulse
from heartq.worker.signals import SignalRelay
from heartq.worker.startup import StartupStopped, StartupWait, check_startup_timeout
from heartq.worker.store_health import StoreHealth
from heartq.worker.supervisor import Supervisor
from heartq.worker.transport_fetch import TransportFetch
from heartq.worker.wakeups import DueWakeups

MAX_CANCEL_GRACE = 5.0
"""A cancelled attempt gets at most 5 s (or one heartbeat interval) to stop by itself."""
MIN_SAVE_TIME = 1.0
"""At shutdown, outcomes get at least 1 s to be saved after the running attempts ended,
whatever is left of `shutdown_timeout`."""
GIL_SWITCH_INTERVAL = 0.001
"""A worker asks CPython to hand the GIL over every 1 ms at most (the default is 5 ms):
a thread waiting on I/O that must get the GIL back after every call into the database
otherwise waits a whole interval each time behind a CPU-bound task thread (the convoy
effect). Measured on SQLite beside one busy thread: a heartbeat took 52 ms at 5 ms and
11 ms at 1 ms (0.4 ms idle), so a CPU-bound task could make its own lease lapse at short
lease settings. The cost for CPU-bound tasks is a few more thread switches."""


class Worker:
    """A worker process's runtime. `run()` blocks until the worker has stopped.

    `startup_timeout`: seconds to wait for the database at startup before giving up with
    `StoreUnavailable` (None, the default: as long as it takes, until told to stop).
    `otel`: trace the app's jobs with OpenTelemetry (`heartq.otel.instrument`), here and
    in each process-pool child (`ConfigError` if opentelemetry-api is not installed).
    `periodic`: enqueue the ticks of the app's periodic schedules and of the runtime
    ones stored in the queue (True, the default; a test's drain runs none:
    `heartq.testing`).
    `max_jobs_per_child`, `max_memory_per_child` (MiB): with `pool="process"`, reuse
    children, each until it ran that many attempts (0: no limit) or its memory after one
    passed the ceiling (`heartq.worker.pools.ChildLimits`; by default a child per attempt).
    `pool_size` (a setting, like the timings): PostgreSQL's pooled connections."""

    def __init__(
        self,
        app: App,
        *,
        queues: Sequence[str] | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
        pool: str = "thread",
        name: str | None = None,
        app_ref: str | None = None,
        startup_timeout: float | None = None,
        otel: bool = False,
        periodic: bool = True,
        max_jobs_per_child: int | None = None,
        max_memory_per_child: float | None = None,
        **settings: Any,
    ) -> None:
        if pool not in POOL_NAMES:
            raise ValueError(f"pool must be one of {', '.join(POOL_NAMES)}, got {pool!r}")
        self.child_limits = ChildLimits.of(pool, max_jobs_per_child, max_memory_per_child)
        payload.check_int("concurrency", concurrency, minimum=1)
        if otel:
            tracing.instrument(app)
        self.otel = otel
        self.app = app
        self.events = app.events
        """Its app's event stream: every event of this worker is told there once."""
        self.settings = s = app.settings.with_overrides(**settings)
        self.startup_timeout = check_startup_timeout(startup_timeout)
        self.store = app.store
        if s.pool_size is not None and s.pool_size != app.settings.pool_size:
            self.store.link.resize_pool(s.pool_size)
        self.id = new_worker_id()
        self.name = None if name is None else payload.check_text("worker name", name)
        self.queues = tuple(
            payload.check_name("queue", queue)
            for queue in queues or sorted({t.queue for t in app.tasks.values()} or {"default"})
        )
        self.concurrency = concurrency
        # Claim ahead from the database only: a transport's messages name the jobs to
        # claim, one claim per message batch.
        self.prefetch = s.prefetch if app.transport is None else 0
        self.pool_name = pool
        self._app_ref = app_ref
        self.ledger = Ledger(self.id, concurrency, self.events)
        self._wake = self.ledger.slot_freed  # also set by enqueues and NOTIFY
        self.due = DueWakeups(self._wake)  # and when a job it knows of falls due
        self._stop_requested = threading.Event()
        self._stop_requested_at: float | None = None
        self._force_stop = threading.Event()
        self.health = StoreHealth(self.id, self.events)
        self.claimer = Claimer(
            self.id,
            app,
            self.ledger,
            settings=s,
            health=self.health,
            queues=self.queues,
            stop=self._stop_requested,
        )
        self.controls = QueueControls(
            self.store,
            self.queues,
            self.events,
            self.id,
            interval=s.pulse_seconds,
            wake=self._wake.set,
        )
        self.claimer.controls = self.controls
        self._signals = SignalRelay(self._on_signal)
        self.started = threading.Event()
        cancel_grace = min(MAX_CANCEL_GRACE, s.heartbeat_interval)
        self.heartbeater = Heartbeater(
            self.store,
            self.ledger,
            interval=s.heartbeat_interval,
            lease=s.lease_seconds,
            trust_window=s.trust_window,
            cancel_grace=cancel_grace,
            health=self.health,
        )
        self.pulse = Pulse(
            self.store,
            self.ledger,
            interval=s.pulse_seconds,
            cancel_grace=cancel_grace,
            health=self.health,
        )
        self.completer = Completer(
            self.store,
            self.ledger,
            health=self.health,
            on_retry=self.due.due_in,
        )
        self._hand_back = HandBack(
            self.id,
            self.store,
            self.ledger,
            claimer=self.claimer,
            heartbeater=self.heartbeater,
            health=self.health,
            force_stop=self._force_stop,
        )
        self.supervisor = Supervisor(
            self.ledger, idle_wait=s.poll_interval, trust_window=s.trust_window
        )
        services: list[Service] = default_services(self.store, s, self.id, self.events)
        if periodic:  # each worker may enqueue the due ticks, code and runtime: no leader
            schedules = list(app.schedules.values())
            services.append(
                Scheduler(schedules, app.make_tick_jobs, self.store, self.id, self.events)
            )
        self.transport = app.transport
        self._fetch = self._choose_fetch(services)  # before the runner copies the services
        self.maintenance = MaintenanceRunner(
            services,
            self.id,
            self.events,
            found_work=self._wake,
            on_failure=self.health.failed,
            on_reclaimed=self._reclaimed,
        )
        self._liveness: LivenessHandle | None = None
        self._listener: LivenessHandle | None = None
        self._registered = False

    def _choose_fetch(self, services: list[Service]) -> Fetch:
        """How this worker gets its jobs, for as long as it runs (`claimer.py`):
        through the transport (docs/NATS.md), whose sweeper joins the maintenance
        `services`; else claims ahead with `prefetch`; else claims for the free slots."""
        if self.transport is not None:
            s = self.settings
            ack_wait = self.transport.options.ack_wait_for(
                s.lease_seconds, s.reclaim_interval_seconds
            )
            services.append(Sweeper(self.transport, self.store, self.queues))
            return TransportFetch(
                self.transport, self.claimer, self.ledger, ack_wait=ack_wait, idle=self._idle
            )
        if self.prefetch:
            return ClaimAheadFetch(self.claimer, self.ledger, self.prefetch)
        return ClaimFetch(self.claimer, self.ledger)

    def _reclaimed(self, jobs: list[Reclaimed]) -> None:
        """Jobs this worker's maintenance put back in the queue: a retry waiting out its
        backoff falls due at a moment the fetch loop wakes for; and the fetch strategy
        hears of them if it must (a transport publishes them)."""
        for job in jobs:
            if job.retry_delay > 0:
                self.due.due_in(job.retry_delay)
        if self._fetch.on_reclaimed is not None:
            self._fetch.on_reclaimed(jobs)

    def _idle(self, seconds: float) -> None:
        """Wait for a wake-up (a slot freed, a stop) for at most `seconds`."""
        self._wake.wait(seconds)
        self._wake.clear()

    # -- public control ----------------------------------------------------------------
    def request_stop(self, force: bool = False) -> None:
        """Begin a graceful shutdown; with `force`, release running jobs without waiting."""
        # Logged once for the graceful stop and once more when it turns forced: an
        # operator reading the log must see that the second signal was heard.
        if not self._stop_requested.is_set() or (force and not self._force_stop.is_set()):
            self.events.emit(events.SHUTDOWN_REQUESTED, worker_id=self.id, force=force)
        if force:
            self._force_stop.set()
        if not self._stop_requested.is_set():
            self._stop_requested_at = time.monotonic()
        self._stop_requested.set()
        self._wake.set()

    def install_signal_handlers(self) -> None:
        """First SIGTERM/SIGINT: graceful stop. Second: stop at once. Acted on by the
        relay's thread, never in the handler (`signals.py` says why)."""
        self._signals.install()

    def _on_signal(self, name: str, count: int) -> None:
        self.events.emit(
            events.SIGNAL_RECEIVED, logging.WARNING, worker_id=self.id, signal=name, count=count
        )
        self.request_stop(force=count > 1)

    @property
    def running_jobs(self) -> list[RunningJob]:
        return self.ledger.running()

    @property
    def last_renewal(self) -> float | None:
        """When the last heartbeat the database answered was sent (monotonic clock)."""
        return self.ledger.last_renewal

    # -- the main loop -----------------------------------------------------------------
    def run(self, burst: bool = False) -> None:
        """Work until stopped; with `burst`, stop once nothing of its queues is running
        (here or elsewhere), runnable, or waiting out a retry's backoff: one burst run
        drains its queues, failures and retries included."""
        try:
            self._startup()
        except StartupStopped:
            self._abort_startup()
            self.events.emit(events.WORKER_STOPPED, worker_id=self.id, released=0, started=False)
            return
        except BaseException:
            self._abort_startup()
            raise
        try:
            while not self._stop_requested.is_set():
                done = self._fetch.round(burst)
                if done.busy:
                    continue
                if burst and done.claimed == 0 and not self._pending():
                    break
                if done.idle is not None:
                    self._wake.wait(self.due.sleep_for(done.idle))
                    self._wake.clear()
        finally:
            self._shutdown()

    def _pending(self) -> bool:
        """Whether a burst run must keep going: an attempt of its own still runs or waits
        in its buffer, or the database holds work of its queues but those an operator
        paused, whose jobs wait for their resume (a failed read counts as work: try
        again)."""
        if self.ledger.running() or self.ledger.ahead():
            return True
        try:
            if not self.controls.known:
                return True
            queues = [q for q in self.queues if not self.controls.control(q).holds_back]
            return bool(queues) and self.store.has_pending(queues)
        except Exception as exc:  # noqa: BLE001 - the database may blip; ask again
            self.events.emit(
                events.CLAIM_FAILED, logging.WARNING, worker_id=self.id, error=str(exc)
            )
            return True

    def _startup(self) -> None:
        s = self.settings
        sys.setswitchinterval(min(sys.getswitchinterval(), GIL_SWITCH_INTERVAL))
        wait = StartupWait(self.id, self._stop_requested, self.startup_timeout, self.events)
        wait.step("connect", self.store.link.reach)
        wait.step("migrate", self.store.link.migrate)
        self._liveness = wait.step(
            "liveness_lock",
            lambda: self.store.link.liveness_hold(
                self.id, liveness_reporter(self.id, self.ledger.request_sweep, self.events)
            ),
        )
        info = WorkerInfo(
            id=self.id,
            name=self.name,
            hostname=socket.gethostname(),
            pid=os.getpid(),
            queues=self.queues,
            concurrency=self.concurrency,
            stale_after=s.stale_after_seconds,  # observers judge this worker by its own
        )
        wait.step("register", lambda: self.store.register_worker(info))
        # Its lease from now, before it claims: the attempts claimed before the
        # heartbeater's first tick (an interval from its start) are then covered by it,
        # not detached one by one at their floors (an index entry and a write each).
        wait.step("lease", lambda: self.store.heartbeat(self.id, [], s.lease_seconds))
        self._registered = True
        self.ledger.pool = self._make_pool()
        wait.step("declare_tasks", self._declare_tasks)
        self.events.emit(
            events.WORKER_STARTED,
            worker_id=self.id,
            name=self.name,
            queues=list(self.queues),
            concurrency=self.concurrency,
            pool=self.pool_name,
            **self._child_fields(),
            url=self.store.link.url,
            heartbeat_interval=s.heartbeat_interval,
            lease=s.lease_seconds,
            reclaim_interval=s.reclaim_interval_seconds,
            liveness="lock" if self.store.link.holds_liveness_lock else "heartbeats",
            recovery_within=s.recovery_within(
                self.store.link.holds_liveness_lock, self.store.liveness_grace
            ),
            wakeups="notify" if self.store.link.supports_notify else "poll",
            claim_commit=self.store.link.claim_commit,
        )
        if self.name:
            name = self.name
            done = wait.step(
                "reconcile",
                lambda: reconcile(self.store, name, self.id, self.events, s.stale_after_seconds),
            )
            self.events.crashed(done.reclaimed)  # here: the process that ran each can't
            if done.suspected:  # judged again once the grace has passed
                self.maintenance.services.append(
                    PendingReconciliation(
                        self.store, name, self.id, self.events, s.stale_after_seconds
                    )
                )
        for part in (
            self.supervisor,
            self.heartbeater,
            self.pulse,
            self.controls,
            self.completer,
            self.maintenance,
        ):
            part.start()
        self._fetch.prepare(self._stop_requested)
        self.app.subscribe_wakeup(self.due)
        if self.store.link.supports_notify:
            self._listener = self.store.link.listen(self._wake.set, on_due=self.due.due_in)
        self.events.hooks.worker_start.run(self._hook_info())
        self.started.set()

    def _declare_tasks(self) -> None:
        """Make this worker's tasks known (queue and policy) to whoever enqueues them by
        name, and move the jobs that waited for a declaration, or for a changed one, to
        it (`heartq.policy`)."""
        policies = [task.policy for task in self.app.tasks.values()]
        changed = self.store.declare_tasks(policies, self.id)
        rerouted = self.store.reroute_jobs(changed) if changed else 0
        self.events.emit(
            events.TASKS_DECLARED,
            worker_id=self.id,
            tasks=sorted(p.name for p in policies),
            changed=changed,
            rerouted=rerouted,
        )

    def _abort_startup(self) -> None:
        """Undo what a failed `_startup` began: no thread, lock or registry row outlives it."""
        self._stop_requested.set()
        for stop in (
            self.heartbeater.stop,
            self.pulse.stop,
            self.controls.stop,
            self.maintenance.stop,
            self.supervisor.stop,
        ):
            with contextlib.suppress(Exception):
                stop()
        with contextlib.suppress(Exception):
            self.completer.stop(time.monotonic() + 1.0)
        for handle in (self._listener, self._liveness):
            if handle is not None:
                with contextlib.suppress(Exception):
                    handle.close()
        if self.ledger.pool is not None:
            with contextlib.suppress(Exception):
                self.ledger.pool.close()
        if self._registered:  # else there is no row, and maybe no database to tell
            with contextlib.suppress(Exception):
                self.store.stop_worker(self.id)
        self.app.unsubscribe_wakeup(self.due)

    def _child_fields(self) -> dict[str, Any]:
        """What `worker_started` says of a process pool that reuses its children."""
        limits = self.child_limits
        if limits.jobs == 1:
            return {}
        memory = None if limits.memory is None else limits.memory / MIB
        return {"max_jobs_per_child": limits.jobs, "max_memory_per_child": memory}

    def _make_pool(self) -> ExecutionPool:
        limit = self.settings.max_payload_bytes
        if self.pool_name == "async":
            return AsyncPool(self.ledger, limit)
        if self.pool_name == "process":
            from heartq.worker.process_pool import ProcessPool, locate_app

            app_ref = self._app_ref or locate_app(self.app)
            url = self.store.link.given_url  # its password too: children connect with it
            return ProcessPool(
                self.ledger, app_ref, limit, url, otel=self.otel, limits=self.child_limits
            )
        return ThreadPool(self.ledger, limit)

    # -- shutdown ----------------------------------------------------------------------
    def _shutdown(self) -> None:
        self.app.unsubscribe_wakeup(self.due)
        if self._listener is not None:
            self._listener.close()
        self._wait_for_running()
        leftover = [run for run in self.ledger.running() if run.ended is None]
        for run in leftover:
            self.ledger.force(run, AttemptEnd(Outcome.RELEASED))
        deadline = self._save_deadline()
        if self.health.down and self._unsaved():
            self.events.emit(
                events.SHUTDOWN_SAVING,
                logging.WARNING,
                worker_id=self.id,
                jobs=len(self._unsaved()),
                deadline_in=round(max(0.0, deadline - time.monotonic()), 3),
            )
        self.completer.stop(deadline, self._force_stop)
        if not self._force_stop.is_set():  # the released jobs' last checkpoints
            self.pulse.flush()
        released = self._hand_back.release(leftover, deadline)
        released += self._hand_back.release_buffer(deadline)
        self._hand_back.give_back_untrusted(deadline)
        self.heartbeater.stop()
        self.pulse.stop()
        self.controls.stop()
        self.maintenance.stop()
        self.supervisor.stop()
        if self.ledger.pool is not None:
            self.ledger.pool.close()
        self.events.hooks.worker_stop.run(self._hook_info())
        unsaved = self._unsaved()
        if unsaved:
            self.events.emit(
                events.SHUTDOWN_UNSAVED,
                logging.ERROR,
                worker_id=self.id,
                job_ids=unsaved,
                forced=self._force_stop.is_set(),
                reason="the database could not be written before the shutdown deadline; "
                "left active for the next worker's liveness probe to reclaim",
            )
        else:
            self._mark_stopped()
        if self._liveness is not None:
            self._liveness.close()
        self.events.emit(
            events.WORKER_STOPPED,
            worker_id=self.id,
            released=released,
            unsaved=len(unsaved),
        )

    def _hook_info(self) -> WorkerHookInfo:
        return WorkerHookInfo(
            worker_id=self.id, name=self.name or "", queues=tuple(self.queues), pool=self.pool_name
        )

    def _save_deadline(self) -> float:
        """Until when the shutdown retries saving and releasing: `shutdown_timeout` after
        the signal, and at least `MIN_SAVE_TIME` from now."""
        start = self._stop_requested_at or time.monotonic()
        return max(start + self.settings.shutdown_timeout, time.monotonic() + MIN_SAVE_TIME)

    def _unsaved(self) -> list[str]:
        """Jobs this worker still holds in the database with nothing saved: outcomes not
        saved, releases not done, untrusted attempts it could not hand back."""
        runs = self.ledger.running() + self.ledger.untrusted()
        return sorted({run.job.id for run in runs} | {job.id for job in self.ledger.ahead()})

    def _mark_stopped(self) -> None:
        try:
            self.store.stop_worker(self.id)
        except Exception as exc:  # noqa: BLE001 - the liveness probe will mark it inactive
            self.events.emit(
                events.WORKER_STOPPED, logging.WARNING, worker_id=self.id, error=str(exc)
            )

    def _wait_for_running(self) -> None:
        """Let running attempts finish, for up to `shutdown_timeout` (not after a second
        signal). Only those whose end is undecided: code the worker already abandoned
        (its outcome decided and queued, `Ledger.abandoned`) is not waited for."""
        deadline = time.monotonic() + self.settings.shutdown_timeout
        while not self._force_stop.is_set() and time.monotonic() < deadline:
            if self.ledger.undecided() == 0:
                return
            self._wake.wait(min(0.05, max(0.0, deadline - time.monotonic())))
            self._wake.clear()
