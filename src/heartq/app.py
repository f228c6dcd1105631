"""`App` and `Task`: the client side of heartq (register tasks, enqueue, wait, cancel).

An `App` is cheap to create and opens its store lazily, so a module can define one at
import time. Producers need not import the task code: `app.enqueue("name", {...})` works
for any task name and takes the task's options from its declaration in the database
(`heartq.policy`); a task registered here is checked and resolved here, with no lookup.
Every way in (`Task.enqueue`, `App.enqueue`, the command line, the async variants, a
pipeline, a schedule's tick) makes and stores its jobs through the app's producer
(`heartq.producer`), so a job behaves the same however it was enqueued.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Generic,
    ParamSpec,
    Protocol,
    TypeVar,
    Unpack,
    overload,
)

from heartq import events, ids, payload, runtime_schedules
from heartq.config import Settings, resolve_url
from heartq.context import JobContext
from heartq.definition import TaskDefinition, TaskOptions
from heartq.errors import ConfigError
from heartq.event_stream import EventStream
from heartq.hooks import Hooks
from heartq.model import CancelResult
from heartq.options import EnqueueOptions, Options
from heartq.periodic import MakeTickJobs, Schedule
from heartq.pipelines import Signature
from heartq.producer import Producer, Waker
from heartq.queue_controls import QueueControl
from heartq.results import EndWaiters
from heartq.store import Store, open_store, redact
from heartq.transport import open_transport, resolve_transport

if TYPE_CHECKING:
    from heartq.transport.nats import NatsTransport

P = ParamSpec("P")
R = TypeVar("R")


class Task(TaskDefinition, Generic[P, R]):
    """A registered task. `task.enqueue(...)` queues it with the arguments its function
    takes (checked here, typed from the function); `task.options(delay=5).enqueue(...)`
    chooses options; calling the task runs the function here, as plain Python."""

    def __init__(
        self, app: App, fn: Callable[..., Any], **options: Unpack[TaskOptions]
    ) -> None:
        """`options`: those of `App.task`, checked by `TaskDefinition`."""
        super().__init__(fn, **options)
        self.app = app

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """This task with these arguments, for a pipeline (`heartq.chain`,
        `heartq.group`); `.set(queue=..., ...)` chooses its enqueue options. A group's
        callback leaves out its first argument: the members' results go there."""
        return Signature(self, args, kwargs)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> str:
        """Queue one job with these arguments, the task's options; returns its id."""
        return self.app.producer.enqueue(self.name, [self.bind(*args, **kwargs)], Options())[0]

    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> str:
        """`enqueue` for asyncio code: the database round trip runs off the event loop."""
        job_args = self.bind(*args, **kwargs)
        return (await self.app.producer.enqueue_async(self.name, [job_args], Options()))[0]

    def options(self, *, connection: Any = None, **options: Unpack[EnqueueOptions]) -> BoundTask[P]:
        """This task with options chosen (`heartq.options`): `task.options(delay=60)
        .enqueue(x=1)`; `connection` enqueues in that connection's open transaction
        (`App.enqueue`)."""
        return BoundTask(self, Options.given("Task.options", options), connection)

    def enqueue_with(
        self,
        args: Mapping[str, Any] | None = None,
        *,
        connection: Any = None,
        **options: Unpack[EnqueueOptions],
    ) -> str:
        """Queue one job from an argument mapping, with options (`heartq.options`) and
        `connection` as `App.enqueue`."""
        return self.app.enqueue(self.name, args, connection=connection, **options)

    def enqueue_many(
        self,
        args_list: Iterable[Mapping[str, Any]],
        *,
        connection: Any = None,
        **options: Unpack[EnqueueOptions],
    ) -> list[str]:
        """Queue one job per argument mapping, in one transaction: all of them or none."""
        return self.app.enqueue_many(self.name, args_list, connection=connection, **options)


class BoundTask(Generic[P]):
    """A task with options chosen for the jobs it enqueues (`Task.options`)."""

    def __init__(self, task: Task[P, Any], options: Options, connection: Any = None) -> None:
        self.task = task
        self.chosen = options
        self.connection = connection

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> str:
        job_args = self.task.bind(*args, **kwargs)
        producer = self.task.app.producer
        return producer.enqueue(self.task.name, [job_args], self.chosen, self.connection)[0]

    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> str:
        job_args = self.task.bind(*args, **kwargs)
        producer = self.task.app.producer
        stored = await producer.enqueue_async(
            self.task.name, [job_args], self.chosen, self.connection
        )
        return stored[0]


class TaskDecorator(Protocol):
    """`@app.task(...)` with options: registers the function it decorates."""

    @overload
    def __call__(self, fn: Callable[Concatenate[JobContext, P], R], /) -> Task[P, R]: ...

    @overload
    def __call__(self, fn: Callable[P, R], /) -> Task[P, R]: ...


class App:
    """The entry point: where the queue lives, its settings, and the registered tasks.

    `strict_tasks=True` refuses an enqueue (`TaskNotDeclared`) of a task this program
    does not register and no worker has declared yet, instead of storing it with the
    defaults until a worker declares it."""

    def __init__(
        self,
        url: str | None = None,
        *,
        strict_tasks: bool = False,
        transport: str | None = None,
        **settings: Any,
    ) -> None:
        self.url = resolve_url(url)
        self.transport_url = resolve_transport(transport)
        """`nats://HOST:PORT` (`transport=`, else `HEARTQ_TRANSPORT`): enqueues also
        publish a wake-up there and workers pull them (docs/NATS.md); None: nothing."""
        self._transport: NatsTransport | None = None
        self._transport_pid = -1
        self.settings = Settings.from_env(**settings)
        self.strict_tasks = strict_tasks
        self.tasks: dict[str, Task[Any, Any]] = {}
        self.schedules: dict[str, Schedule] = {}
        self._store: Store | None = None
        self._store_pid = -1
        self._lock = threading.Lock()
        self._waiters = EndWaiters(lambda: self.store)
        self.events = EventStream()
        """This app's events, each told once to its subscribers: the log, a worker's
        metrics, your listeners (`app.events.subscribe(listener)`; `heartq.event_stream`)."""
        self.hooks: Hooks = self.events.hooks
        """Code of yours around every enqueue, attempt, and a worker's start and stop
        (`heartq.hooks`): `@app.hooks.attempt`, `@app.hooks.enqueue` ... The hooks are
        subscribers of this app's events too (`app.events.hooks`)."""
        self.producer = Producer(self)
        """Makes and stores this app's jobs, for every way in (`heartq.producer`)."""

    def __repr__(self) -> str:
        return f"<heartq.App {redact(self.url)} tasks={sorted(self.tasks)}>"

    # -- the store, opened lazily and once per process -----------------------------------
    @property
    def store(self) -> Store:
        with self._lock:
            if self._store is None or self._store_pid != os.getpid():
                self._store = open_store(self.url, pool_size=self.settings.pool_size)
                self._store_pid = os.getpid()
            return self._store

    @property
    def transport(self) -> NatsTransport | None:
        """The transport connection (opened lazily, once per process), or None."""
        if self.transport_url is None:
            return None
        with self._lock:
            if self._transport is None or self._transport_pid != os.getpid():
                self._transport = open_transport(
                    self.transport_url, self._deployment_id, self.events
                )
                self._transport_pid = os.getpid()
            return self._transport

    def _deployment_id(self) -> str:
        """The queue database's deployment id, for the transport's names (read on its
        first use, from whichever database the app points at then)."""
        return self.store.link.deployment_id()

    def use_transport(self, url: str | None) -> None:
        """Use another transport, or none (the command line's `--transport`)."""
        with self._lock:
            if self._transport is not None and self._transport_pid == os.getpid():
                self._transport.close()
            self._transport = None
            self.transport_url = resolve_transport(url)

    def use_url(self, url: str) -> None:
        """Point this app at another queue (the command line's `--url`). A transport
        already open is closed too: its NATS names were the other queue's."""
        self._waiters.close()
        with self._lock:
            if self._store is not None and self._store_pid == os.getpid():
                self._store.link.close()
            self._store = None
            if self._transport is not None and self._transport_pid == os.getpid():
                self._transport.close()
            self._transport = None
            self.url = url

    def migrate(self) -> int:
        return self.store.link.migrate()

    def close(self) -> None:
        self._waiters.close()
        with self._lock:
            if self._store is not None and self._store_pid == os.getpid():
                self._store.link.close()
            self._store = None
            if self._transport is not None and self._transport_pid == os.getpid():
                self._transport.close()
            self._transport = None

    # -- tasks ---------------------------------------------------------------------------
    @overload
    def task(self, fn: Callable[Concatenate[JobContext, P], R], /) -> Task[P, R]: ...

    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(self, fn: None = None, /, **options: Unpack[TaskOptions]) -> TaskDecorator: ...

    def task(
        self, fn: Callable[..., Any] | None = None, /, **options: Unpack[TaskOptions]
    ) -> Task[Any, Any] | TaskDecorator:
        """Register a function (sync or `async def`) as a task. Its name defaults to the
        function's `__name__`; a second task with the same name is an error. A `ctx`
        parameter (first, for type checkers) receives the `JobContext`.
        `concurrency_key` (a `str.format` template of the job's arguments, e.g.
        `"tenant:{tenant}"`) with `concurrency_limit`: at most that many of its jobs with
        the same key run at once; filled in by an app that registers the task (an enqueue
        by name elsewhere passes `concurrency_key=`/`concurrency_limit=` itself).
        `rate_limit` (`"100/m"`: starts per period, units s, m, h, `"3/10s"`): at most
        that many attempts of its jobs start in any such period, across every worker, per
        `rate_key` (a template like `concurrency_key`'s; None: the task's name, one limit
        for the whole task). Declared with the task, so an enqueue by name anywhere takes
        it. `retry_on` (exception classes; None: every exception) and `dont_retry_on`: an
        exception of the code that `dont_retry_on` matches, or that `retry_on` does not,
        ends the job dead at once, like `heartq.Permanent`. `retry_schedule`
        (`"exponential"`, `"linear"`: `retry_backoff * attempt`, `"constant"`:
        `retry_backoff`, each capped at `retry_backoff_max`) and `retry_jitter` (False: the
        exact waits) shape the waits between attempts; `retry_intervals` (`[1, 10, 60]`:
        the wait after each failed attempt, the last repeated) replaces them, and
        `retry_delay` (`fn(attempt, exc)` returning seconds or None), asked by the worker
        running the attempt, comes before all of them (its failure falls back to them,
        logged as `retry_delay_failed`). `max_snoozes` (100): a job's first that many
        snoozes (`heartq.Snooze`, raised or returned by its code) are not counted as
        attempts; each one after is a failed attempt. `expires` (seconds; none by default):
        each of its jobs must have started within that long of when it was first due,
        unless its enqueue gives its own `expires`. A bad one raises `ConfigError` here."""

        def register(func: Callable[..., Any]) -> Task[Any, Any]:
            task: Task[Any, Any] = Task(self, func, **options)
            if task.name in self.tasks:
                raise ConfigError(f"a task named {task.name!r} is already registered")
            self.tasks[task.name] = task
            return task

        return register(fn) if fn is not None else register

    def periodic(
        self,
        *,
        cron: str | None = None,
        every: float | None = None,
        args: Mapping[str, Any] | None = None,
        tz: str = "UTC",
        catch_up: str = "latest",
        name: str | None = None,
    ) -> Callable[[Task[P, R]], Task[P, R]]:
        """Run a task on a schedule: `@app.periodic(cron="*/5 * * * *")` or
        `@app.periodic(every=30)` stacked above `@app.task`. `cron` is read in the time
        zone `tz` (an IANA name); `every` is seconds (at least 1), ticks on multiples of it
        since the epoch. `args` are the job's arguments (checked against the function
        now). `catch_up` says what runs after a time no worker ran: `latest` (one run for
        the missed ticks), `all` (each, at most 1000), `none`. `name` defaults to the
        task's. Every worker of this app enqueues the due ticks; the database makes each
        tick one job (docs/design/policies.md, "Periodic jobs"). Bad schedules raise
        `ConfigError` here, at import."""

        def register(task: Task[P, R]) -> Task[P, R]:
            if not isinstance(task, Task) or task.app is not self:
                raise ConfigError(
                    "@app.periodic decorates a task of this app: put it above @app.task"
                )
            job_args = task.bind(**dict(args or {}))
            payload.encode_args(job_args, limit=self.settings.max_payload_bytes)
            schedule = Schedule(
                name=name or task.name,
                task=task.name,
                cron=cron,
                every=every,
                args=job_args,
                tz=tz,
                catch_up=catch_up,
            )
            if schedule.name in self.schedules:
                raise ConfigError(f"a schedule named {schedule.name!r} is already registered")
            self.schedules[schedule.name] = schedule
            return task

        return register

    @property
    def make_tick_jobs(self) -> MakeTickJobs:
        """How the jobs of this app's schedules' ticks are made, for the workers' scheduler
        (`heartq.maintenance.scheduler`). A property, like `store`: the jobs it makes are
        not among heartq's public names, which a public method's answer must be."""
        return self.producer.tick_jobs

    # -- enqueue: the jobs are made and stored by the producer (`heartq.producer`) ------
    def enqueue(
        self,
        task: str,
        args: Mapping[str, Any] | None = None,
        *,
        connection: Any = None,
        **options: Unpack[EnqueueOptions],
    ) -> str:
        """Queue one job of `task` (any name: registered here or not) with keyword
        arguments `args`; returns its id. Bad input raises before anything is stored.
        `connection`: the caller's connection, in its open transaction (a
        `sqlite3.Connection` on the queue's file, a `psycopg.Connection`): the job exists
        if and only if that transaction commits. `unique_key`: while a job with that key
        is queued or running (with `unique_for`, or finished less than that many seconds
        ago), nothing is stored and that job's id is returned. `concurrency_key` with
        `concurrency_limit`: at most that many jobs with the key run at once (a task
        registered here with a template of its own takes it unless these are given).
        `rate_key` (with `rate_limit`, `"10/s"`, or the task's declared limit): at most
        that many attempts of jobs with the key start per period, across the fleet.
        Every option: `heartq.options`."""
        chosen = Options.given("App.enqueue", options)
        checked = [self.producer.check_args(task, args)]
        return self.producer.enqueue(task, checked, chosen, connection)[0]

    def enqueue_many(
        self,
        task: str,
        args_list: Iterable[Mapping[str, Any]],
        *,
        connection: Any = None,
        **options: Unpack[EnqueueOptions],
    ) -> list[str]:
        """Queue many jobs of one task in one transaction: all of them, or none (in the
        caller's transaction with `connection`, as `enqueue`). `unique_key` is one key
        for the whole batch (of one job's repeats: every job answers the one that holds
        it; jobs that differ under one key are refused, `ConfigError`, nothing stored) or a
        function of each job's arguments. `concurrency_key`/`concurrency_limit` as `enqueue`."""
        chosen = Options.given("App.enqueue_many", options)
        checked = [self.producer.check_args(task, args) for args in args_list]
        return self.producer.enqueue(task, checked, chosen, connection) if checked else []

    async def enqueue_async(
        self,
        task: str,
        args: Mapping[str, Any] | None = None,
        *,
        connection: Any = None,
        **options: Unpack[EnqueueOptions],
    ) -> str:
        """`enqueue` for asyncio code: the database round trips run off the event loop;
        `connection` may be a `psycopg.AsyncConnection` in its open transaction."""
        chosen = Options.given("App.enqueue_async", options)
        checked = [self.producer.check_args(task, args)]
        return (await self.producer.enqueue_async(task, checked, chosen, connection))[0]

    async def enqueue_many_async(
        self,
        task: str,
        args_list: Iterable[Mapping[str, Any]],
        *,
        connection: Any = None,
        **options: Unpack[EnqueueOptions],
    ) -> list[str]:
        """`enqueue_many` for asyncio code."""
        chosen = Options.given("App.enqueue_many_async", options)
        checked = [self.producer.check_args(task, args) for args in args_list]
        if not checked:
            return []
        return await self.producer.enqueue_async(task, checked, chosen, connection)

    # -- results -------------------------------------------------------------------------
    def result(self, job_id: str, timeout: float | None = None) -> Any:
        """Wait for the job to end and return its result. Raises `JobDead` (with its last
        error) or `JobCancelled` if it ended otherwise, `JobDead` of the dead job that
        holds it if it is blocked (however far up its pipeline; `.blocked`: this job),
        `ResultTimeout` if it has not ended within `timeout` seconds (None: wait as long
        as it takes), `JobNotFound`."""
        payload.check_duration("timeout", timeout, allow_zero=True)
        return self._waiters.wait(job_id, timeout)

    async def result_async(self, job_id: str, timeout: float | None = None) -> Any:
        """`result` for asyncio code: waits without holding a thread."""
        payload.check_duration("timeout", timeout, allow_zero=True)
        return await self._waiters.wait_async(job_id, timeout)

    # -- inspect and control -------------------------------------------------------------
    def get_job(self, job_id: str) -> dict[str, Any]:
        """The job as `heartq jobs show ID --json` prints it. Raises `JobNotFound`."""
        return self.store.get_job(job_id)

    def cancel(self, job_id: str, by: str | None = None) -> CancelResult:
        """Cancel a queued job at once, or ask a running job's worker to stop it. `by`
        says who asked (kept as the job's `cancelled_by`; default: `app.cancel` with the
        OS user, host and pid)."""
        return self.store.cancel_job(job_id, by=by or ids.requester("app.cancel"))

    def replay(self, *job_ids: str) -> list[str]:
        """Replay these dead jobs, as `heartq dlq replay` does (attempts reset, history
        kept); the jobs they blocked wait for them again, and run once they succeed. The
        ids replayed: a job that is not dead is left as it is."""
        return self.store.replay_dead(list(job_ids))

    # -- queues controlled while workers run (heartq.queue_controls) --------------------
    def pause_queue(self, queue: str, by: str | None = None) -> QueueControl:
        """Pause `queue` on every worker within about a second, and on every worker
        started later, until `resume_queue`: none of its jobs starts; running ones
        finish, queued ones keep their place. `by`: who asked (default: the OS user,
        host and pid)."""
        return self._control(queue, paused=True, by=by or ids.requester("app.pause_queue"))

    def resume_queue(self, queue: str, by: str | None = None) -> QueueControl:
        """Let `queue`'s jobs start again after `pause_queue`."""
        return self._control(queue, paused=False, by=by or ids.requester("app.resume_queue"))

    def scale_queue(
        self, queue: str, concurrency: int | None, by: str | None = None
    ) -> QueueControl:
        """Cap how many of `queue`'s jobs EACH worker runs at once, within about a second
        (None: no cap, each worker's own concurrency; 0 holds the queue like a pause).
        Jobs over the cap that already run finish; none starts until the queue is under
        it."""
        by = by or ids.requester("app.scale_queue")
        return self._control(queue, scale=True, concurrency=concurrency, by=by)

    def queue_controls(self) -> dict[str, QueueControl]:
        """Every controlled queue's stored controls, by queue."""
        return self.store.queue_controls()

    def _control(
        self,
        queue: str,
        *,
        by: str,
        paused: bool | None = None,
        scale: bool = False,
        concurrency: int | None = None,
    ) -> QueueControl:
        control = self.store.set_queue_control(
            queue, paused=paused, scale=scale, concurrency=concurrency, by=by
        )
        self.events.emit(
            events.QUEUE_CONTROLLED,
            logging.INFO,
            queue=control.queue,
            paused=control.paused,
            concurrency=control.concurrency,
            by=by,
        )
        return control

    # -- periodic schedules added while workers run (heartq.runtime_schedules) ----------
    def add_schedule(
        self,
        name: str,
        task: str,
        *,
        cron: str | None = None,
        every: float | None = None,
        args: Mapping[str, Any] | None = None,
        tz: str = "UTC",
        catch_up: str = "latest",
        queue: str | None = None,
        paused: bool = False,
        replace: bool = False,
        by: str | None = None,
    ) -> bool:
        """Run `task` (any name: registered here or not) on a schedule stored in the
        database, as `@app.periodic` does in code: every worker with `periodic` on runs it
        within about a second, without a restart, each tick one job across the fleet.
        `cron`/`every`/`args`/`tz`/`catch_up` as `periodic`; `queue`: its jobs' queue
        (None: the task's). True: added; False: a runtime schedule of that name replaced
        (`replace=True`; else `ConfigError`). A name this app or the fleet declares in
        code is refused: code wins. Bad input raises `ConfigError` here, nothing stored."""
        if name in self.schedules:
            raise ConfigError(
                f"schedule {name!r} is declared in code (@app.periodic): a runtime "
                "schedule cannot take its name"
            )
        schedule = runtime_schedules.build(
            name, task, cron=cron, every=every, args=args, tz=tz, catch_up=catch_up, queue=queue
        )
        self.producer.check_args(task, schedule.args)  # a task registered here: its args
        by = by or ids.requester("app.add_schedule")
        added = runtime_schedules.add(self.store, schedule, paused=paused, replace=replace, by=by)
        self._schedule_changed(name, "added" if added else "replaced", by)
        return added

    def remove_schedule(self, name: str, by: str | None = None) -> bool:
        """Remove a runtime schedule: no tick after the workers' next pass (about a
        second). False: there was none. A code schedule is refused (`ConfigError`):
        remove it from the code, or pause it."""
        removed = self.store.remove_schedule(name)
        if removed:
            self._schedule_changed(name, "removed", by or ids.requester("app.remove_schedule"))
        return removed

    def pause_schedule(self, name: str, by: str | None = None) -> bool:
        """Pause a schedule, runtime or code, on every worker within about a second: its
        ticks pass without a job until `resume_schedule` (which starts at the next tick,
        not catching the pause up). False: no such schedule (a code schedule has one
        once a worker ran it)."""
        return self._pause(name, True, by or ids.requester("app.pause_schedule"))

    def resume_schedule(self, name: str, by: str | None = None) -> bool:
        """Let a paused schedule's ticks enqueue again, from its next tick."""
        return self._pause(name, False, by or ids.requester("app.resume_schedule"))

    def _pause(self, name: str, paused: bool, by: str) -> bool:
        done = self.store.pause_schedule(name, paused, by)
        if done:
            self._schedule_changed(name, "paused" if paused else "resumed", by)
        return done

    def _schedule_changed(self, name: str, change: str, by: str) -> None:
        self.events.emit(events.SCHEDULE_CHANGED, logging.INFO, schedule=name, change=change, by=by)

    # -- local wake-ups: a worker in this process starts at once on its own enqueues ----
    def subscribe_wakeup(self, waker: Waker) -> None:
        """Tell `waker` of every enqueue through this app: a worker in this process then
        claims at once instead of at its next poll, and when a delayed job falls due."""
        self.producer.subscribe_wakeup(waker)

    def unsubscribe_wakeup(self, waker: Waker) -> None:
        self.producer.unsubscribe_wakeup(waker)
