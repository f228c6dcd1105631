"""`App` and `Task`: the client side of heartq (register tasks, enqueue, wait, cancel).

An `App` is cheap to create and opens its store lazily, so a module can define one at
import time. Producers need not import the task code: `app.enqueue("name", {...})` works
for any task name and takes the task's options from its declaration in the database
(`heartq.policy`); a task registered here is checked and resolved here, with no lookup.
Every way in (`Task.enqueue`, `App.enqueue`, the command line, the async variants) goes
through `App._enqueue`, so a job behaves the same however it was enqueued.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import inspect
import logging
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
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

from heartq import arguments, display, events, ids, payload, policy, rates, unique
from heartq.config import Settings, resolve_url
from heartq.context import JobContext
from heartq.errors import ConfigError, TaskNotDeclared, TaskNotDeclaredWarning
from heartq.hooks import EnqueueRun, Hooks, hooked_enqueue
from heartq.lifecycle.retry import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_RETRY_BACKOFF,
    DEFAULT_RETRY_BACKOFF_MAX,
    EXPONENTIAL,
    Backoff,
    ExceptionClasses,
    RetryOn,
)
from heartq.model import CancelResult, NewJob, TaskPolicy
from heartq.options import EnqueueOptions, Options
from heartq.periodic import TICK_UNIQUE_FOR, MakeTickJobs, Schedule
from heartq.pipelines import Signature
from heartq.policy import DEFAULT_QUEUE
from heartq.results import EndWaiters
from heartq.store import Store, open_store, redact
from heartq.transport import open_transport, resolve_transport

if TYPE_CHECKING:
    from heartq.transport.nats import NatsTransport

P = ParamSpec("P")
R = TypeVar("R")


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
"""heartq's own files: a warning names the first line outside them (the caller's)."""


def _warn_caller(warning: Warning | None) -> None:
    """`warnings.warn` naming the caller's line: the first frame outside heartq (what
    Python 3.12's `skip_file_prefixes` does; written here for 3.11)."""
    if warning is None:
        return
    frame, level = sys._getframe(1), 2
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    warnings.warn(warning, stacklevel=level)


class Task(Generic[P, R]):
    """A registered task. `task.enqueue(...)` queues it with the arguments its function
    takes (checked here, typed from the function); `task.options(delay=5).enqueue(...)`
    chooses options; calling the task runs the function here, as plain Python."""

    def __init__(
        self,
        app: App,
        fn: Callable[..., Any],
        *,
        name: str,
        queue: str,
        max_retries: int,
        timeout: float | None,
        heartbeat_timeout: float | None,
        retry_backoff: float,
        retry_backoff_max: float,
        priority: int,
        concurrency_key: str | None = None,
        concurrency_limit: int | None = None,
        rate_limit: str | None = None,
        rate_key: str | None = None,
        retry_on: ExceptionClasses = None,
        dont_retry_on: ExceptionClasses = None,
        retry_schedule: str = EXPONENTIAL,
        retry_jitter: bool = True,
    ) -> None:
        self.app = app
        self.fn = fn
        self.name = payload.check_name("task", name)
        self.queue = payload.check_name("queue", queue)
        payload.check_int("max_retries", max_retries, minimum=0)
        payload.check_int("priority", priority)
        payload.check_duration("timeout", timeout)
        payload.check_duration("heartbeat_timeout", heartbeat_timeout)
        payload.check_duration("retry_backoff", retry_backoff, allow_zero=True)
        payload.check_duration("retry_backoff_max", retry_backoff_max, allow_zero=True)
        self.max_retries = max_retries
        self.timeout = timeout
        self.heartbeat_timeout = heartbeat_timeout
        self.retry_backoff = retry_backoff
        self.retry_backoff_max = retry_backoff_max
        self.priority = priority
        self.concurrency_key, self.concurrency_limit = concurrency_key, concurrency_limit
        if concurrency_key is not None:
            payload.check_concurrency(concurrency_key, concurrency_limit)
            arguments.template_fields(concurrency_key)
        else:
            payload.check_concurrency(None, concurrency_limit)
        self.rate_limit = (
            None if rate_limit is None else rates.parse_rate(rate_limit, f"{name}: rate_limit")
        )
        """At most this many attempt starts per period (`heartq.rates`), per `rate_key`."""
        self.rate_key = rate_key
        if rate_key is not None:
            if rate_limit is None:
                raise ConfigError(f"{name}: rate_key needs a rate_limit, like rate_limit='10/s'")
            payload.check_key("rate_key", rate_key)
            arguments.template_fields(rate_key, "rate_key")
        self.retry_rule = RetryOn.of(retry_on, dont_retry_on)
        """Which exceptions of its code are worth another attempt (judged by the worker)."""
        self.backoff = Backoff(retry_schedule, retry_jitter)
        """The shape of its waits between attempts (exponential, linear, constant; jitter)."""
        self.is_async = inspect.iscoroutinefunction(fn)
        self.signature = arguments.call_signature(fn)
        self.parameters = arguments.describe(self.signature)
        self.wants_ctx = arguments.CONTEXT_PARAMETER in inspect.signature(fn).parameters
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", name)
        self.__module__ = fn.__module__
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)

    @functools.cached_property
    def policy(self) -> TaskPolicy:
        """What a worker running this task declares to the database (its parameters
        too: an enqueue by name elsewhere is checked against them). Made once: a task's
        options are fixed when it is defined, and a worker reads this for every job."""
        retry_on, dont_retry_on = self.retry_rule.names()
        return TaskPolicy(
            name=self.name,
            queue=self.queue,
            priority=self.priority,
            max_retries=self.max_retries,
            retry_backoff=self.retry_backoff,
            retry_backoff_max=self.retry_backoff_max,
            timeout=self.timeout,
            heartbeat_timeout=self.heartbeat_timeout,
            parameters=self.parameters,
            rate_limit=None if self.rate_limit is None else self.rate_limit.spec,
            rate_key=self.rate_key,
            retry_schedule=self.backoff.schedule,
            retry_jitter=self.backoff.jitter,
            retry_on=retry_on,
            dont_retry_on=dont_retry_on,
        )

    @property
    def defaults(self) -> dict[str, Any]:
        """The function's default argument values, by name (what a key template reads
        for an argument a job leaves out)."""
        return {
            p.name: p.default
            for p in self.signature.parameters.values()
            if p.default is not inspect.Parameter.empty
        }

    def concurrency_for(self, args: Mapping[str, Any]) -> tuple[str | None, int | None]:
        """The concurrency key and limit this task declares for a job with these
        arguments: its template filled from them; `TypeError` naming one it lacks."""
        if self.concurrency_key is None:
            return None, None
        key = arguments.fill_template(
            self.name, "concurrency_key", self.concurrency_key, args, self.defaults
        )
        return key, self.concurrency_limit

    def bind(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The job arguments for this call; `TypeError` naming a wrong or missing one."""
        return arguments.bind(self.name, self.signature, args, kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the function in the caller, as plain Python (handy in tests)."""
        return self.fn(*args, **kwargs)

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """This task with these arguments, for a pipeline (`heartq.chain`,
        `heartq.group`); `.set(queue=..., ...)` chooses its enqueue options. A group's
        callback leaves out its first argument: the members' results go there."""
        return Signature(self, args, kwargs)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> str:
        """Queue one job with these arguments, the task's options; returns its id."""
        return self.app._enqueue(self.name, [self.bind(*args, **kwargs)], Options())[0]

    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> str:
        """`enqueue` for asyncio code: the database round trip runs off the event loop."""
        job_args = self.bind(*args, **kwargs)
        return (await self.app._enqueue_async(self.name, [job_args], Options()))[0]

    def options(
        self, *, connection: Any = None, **options: Unpack[EnqueueOptions]
    ) -> BoundTask[P]:
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

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.queue}>"


class BoundTask(Generic[P]):
    """A task with options chosen for the jobs it enqueues (`Task.options`)."""

    def __init__(self, task: Task[P, Any], options: Options, connection: Any = None) -> None:
        self.task = task
        self.chosen = options
        self.connection = connection

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> str:
        job_args = self.task.bind(*args, **kwargs)
        app = self.task.app
        return app._enqueue(self.task.name, [job_args], self.chosen, self.connection)[0]

    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> str:
        job_args = self.task.bind(*args, **kwargs)
        app = self.task.app
        ids = await app._enqueue_async(self.task.name, [job_args], self.chosen, self.connection)
        return ids[0]


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
        self._wakeups: list[threading.Event] = []
        self._waiters = EndWaiters(lambda: self.store)
        self.hooks = Hooks()
        """Code of yours around every enqueue, attempt, and a worker's start and stop
        (`heartq.hooks`): `@app.hooks.attempt`, `@app.hooks.enqueue` ..."""

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
                self._transport = open_transport(self.transport_url, self._deployment_id)
                self._transport_pid = os.getpid()
            return self._transport

    def _deployment_id(self) -> str:
        """The queue database's deployment id, for the transport's names (read on its
        first use, from whichever database the app points at then)."""
        return self.store.deployment_id()

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
                self._store.close()
            self._store = None
            if self._transport is not None and self._transport_pid == os.getpid():
                self._transport.close()
            self._transport = None
            self.url = url

    def migrate(self) -> int:
        return self.store.migrate()

    def close(self) -> None:
        self._waiters.close()
        with self._lock:
            if self._store is not None and self._store_pid == os.getpid():
                self._store.close()
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
    def task(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        queue: str = DEFAULT_QUEUE,
        max_retries: int = DEFAULT_MAX_RETRIES,
        timeout: float | None = None,
        heartbeat_timeout: float | None = None,
        retry_backoff: float = DEFAULT_RETRY_BACKOFF,
        retry_backoff_max: float = DEFAULT_RETRY_BACKOFF_MAX,
        priority: int = 0,
        concurrency_key: str | None = None,
        concurrency_limit: int | None = None,
        rate_limit: str | None = None,
        rate_key: str | None = None,
        retry_on: ExceptionClasses = None,
        dont_retry_on: ExceptionClasses = None,
        retry_schedule: str = EXPONENTIAL,
        retry_jitter: bool = True,
    ) -> TaskDecorator: ...

    def task(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        queue: str = DEFAULT_QUEUE,
        max_retries: int = DEFAULT_MAX_RETRIES,
        timeout: float | None = None,
        heartbeat_timeout: float | None = None,
        retry_backoff: float = DEFAULT_RETRY_BACKOFF,
        retry_backoff_max: float = DEFAULT_RETRY_BACKOFF_MAX,
        priority: int = 0,
        concurrency_key: str | None = None,
        concurrency_limit: int | None = None,
        rate_limit: str | None = None,
        rate_key: str | None = None,
        retry_on: ExceptionClasses = None,
        dont_retry_on: ExceptionClasses = None,
        retry_schedule: str = EXPONENTIAL,
        retry_jitter: bool = True,
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
        exact waits) shape the waits between attempts. A bad one raises `ConfigError` here."""

        def register(func: Callable[..., Any]) -> Task[Any, Any]:
            task: Task[Any, Any] = Task(
                self,
                func,
                name=name or func.__name__,
                queue=queue,
                max_retries=max_retries,
                timeout=timeout,
                heartbeat_timeout=heartbeat_timeout,
                retry_backoff=retry_backoff,
                retry_backoff_max=retry_backoff_max,
                priority=priority,
                concurrency_key=concurrency_key,
                concurrency_limit=concurrency_limit,
                rate_limit=rate_limit,
                rate_key=rate_key,
                retry_on=retry_on,
                dont_retry_on=dont_retry_on,
                retry_schedule=retry_schedule,
                retry_jitter=retry_jitter,
            )
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
        tick one job (docs/DESIGN.md, "Periodic jobs"). Bad schedules raise
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
        return self._tick_jobs

    @contextlib.contextmanager
    def _tick_jobs(self, schedule: Schedule, ticks: Iterable[float]) -> Iterator[EnqueueRun]:
        """The jobs of a schedule's ticks: its task's with its arguments, each keyed by
        its tick so the fleet makes it once, inside the enqueue hooks like any enqueue."""
        made = []
        for tick in ticks:
            options = Options(unique_key=schedule.tick_key(tick), unique_for=TICK_UNIQUE_FOR)
            (job,), _, _ = self._new_jobs(schedule.task, [dict(schedule.args)], options)
            made.append(dataclasses.replace(job, schedule=schedule.name))
        args_list = [dict(schedule.args) for _ in made]
        limit = self.settings.max_payload_bytes
        with hooked_enqueue(self.hooks.enqueue, made, args_list, limit=limit) as run:
            yield run

    # -- enqueue -------------------------------------------------------------------------
    def _policy_for(self, task_name: str) -> tuple[TaskPolicy, bool]:
        """The policy a new job of this task takes, and whether the task is declared (or
        registered here); strict mode refuses a task that is neither."""
        task = self.tasks.get(task_name)
        if task is not None:
            return task.policy, True
        declared = self.store.task_policies([task_name]).get(task_name)
        if declared is not None:
            return declared, True
        if self.strict_tasks:
            raise TaskNotDeclared(task_name)
        return policy.defaults(task_name), False

    def _enqueue(
        self,
        task_name: str,
        args_list: list[dict[str, Any]],
        options: Options,
        connection: Any = None,
    ) -> list[str]:
        """Every enqueue comes here: checks, resolves the policy, stores, wakes, and
        warns the caller of a task not declared yet (`TaskNotDeclaredWarning`)."""
        ids, notice = self._store_jobs(task_name, args_list, options, connection)
        _warn_caller(notice)
        return ids

    def _store_jobs(
        self,
        task_name: str,
        args_list: list[dict[str, Any]],
        options: Options,
        connection: Any = None,
    ) -> tuple[list[str], TaskNotDeclaredWarning | None]:
        """Store the jobs: their ids, and the warning their caller gets (None: the task
        is declared). With a connection, the jobs are written in its open transaction;
        workers hear of them when it commits (PostgreSQL's NOTIFY), or at their next poll
        (SQLite)."""
        jobs, declared, resolved = self._new_jobs(task_name, args_list, options)
        unique.refuse_collisions(jobs)
        limit = self.settings.max_payload_bytes
        with hooked_enqueue(self.hooks.enqueue, jobs, args_list, limit=limit) as run:
            ids = self.store.enqueue(run.jobs, connection=connection)
            run.stored(ids)
        if self.transport_url is not None and connection is None:
            self._publish(jobs, ids)
        answer = self._enqueued(task_name, ids, declared, resolved, connection is None)
        unique.check_conflicts(run.jobs, ids, options)
        return answer

    def _enqueue_pipeline(
        self, jobs: list[NewJob], args_list: list[dict[str, Any]], connection: Any = None
    ) -> list[str]:
        """Store the jobs of a pipeline (`heartq.pipelines`: of any tasks, each made by
        `_new_jobs`, their dependencies set) in one transaction, as `_store_jobs` stores
        one task's: hooks, wake-ups, and a warning per task not declared yet."""
        limit = self.settings.max_payload_bytes
        with hooked_enqueue(self.hooks.enqueue, jobs, args_list, limit=limit) as run:
            ids = self.store.enqueue(run.jobs, connection=connection)
            run.stored(ids)
        if self.transport_url is not None and connection is None:
            self._publish(jobs, ids)
        for name in dict.fromkeys(job.task for job in jobs):
            task_policy, declared = self._policy_for(name)
            if not declared:
                mine = [i for job, i in zip(jobs, ids, strict=True) if job.task == name]
                resolved = policy.resolve(task_policy, None, None, None)
                _warn_caller(self._not_declared(name, mine, resolved))
        if connection is None:
            self._wake_local_workers()
        return ids

    async def _enqueue_async(
        self,
        task_name: str,
        args_list: list[dict[str, Any]],
        options: Options,
        connection: Any = None,
    ) -> list[str]:
        """`_enqueue` for asyncio code: its round trips off the event loop, or on an
        asyncio connection's own (a `psycopg.AsyncConnection`). The warning is given
        here, in the caller's coroutine, so it names the caller's line."""
        if connection is None:
            ids, notice = await asyncio.to_thread(self._store_jobs, task_name, args_list, options)
        elif not inspect.iscoroutinefunction(getattr(connection, "execute", None)):
            # a plain connection belongs to its thread (sqlite3 checks): used right here
            ids, notice = self._store_jobs(task_name, args_list, options, connection)
        else:
            jobs, declared, resolved = await asyncio.to_thread(
                self._new_jobs, task_name, args_list, options
            )
            unique.refuse_collisions(jobs)
            limit = self.settings.max_payload_bytes
            with hooked_enqueue(self.hooks.enqueue, jobs, args_list, limit=limit) as run:
                stored = await self.store.enqueue_async(run.jobs, connection)
                run.stored(stored)
            ids, notice = await asyncio.to_thread(
                self._enqueued, task_name, stored, declared, resolved, False
            )
            unique.check_conflicts(run.jobs, ids, options)
        _warn_caller(notice)
        return ids

    def _publish(self, jobs: Sequence[NewJob], ids: Sequence[str]) -> None:
        """After the commit, a wake-up for each job runnable now: the database is the
        outbox, so a failed publish loses nothing (a worker's sweeper publishes what
        stays queued, and delayed jobs when due). Jobs with a concurrency key are left to
        the database claim, which counts their key; transactional enqueues
        (`connection=`) to the sweeper, as their commit is the caller's; jobs with
        dependencies too (the sweeper publishes them once released). A job with a rate
        key is published as a wake-up only: the claim by id never takes it, so the worker
        that hears it claims from the database at once, which counts its key."""
        transport = self.transport
        assert transport is not None
        due = [
            (job_id, job.queue)
            for job, job_id in zip(jobs, ids, strict=True)
            if job.delay <= 0 and job.concurrency_key is None and not job.depends_on
        ]
        transport.publish(due)

    def _new_jobs(
        self,
        task_name: str,
        args_list: list[dict[str, Any]],
        options: Options,
        bound: bool = False,
    ) -> tuple[list[NewJob], bool, dict[str, Any]]:
        """The jobs to store, whether their task is declared, and the policy resolved.
        `bound`: the arguments were bound against the task's function already (a
        pipeline's signature; a task registered here always is)."""
        payload.check_name("task", task_name)
        task_policy, declared = self._policy_for(task_name)
        task = self.tasks.get(task_name)
        if task is None and not bound:
            args_list = self._bind_declared(task_policy, args_list)
        chosen = options.chosen
        resolved = policy.resolve(
            task_policy, chosen.get("queue"), chosen.get("priority"), chosen.get("max_retries")
        )
        limit = self.settings.max_payload_bytes
        meta_json = payload.encode_meta(chosen.get("meta") or {}, limit=limit)
        rate = policy.RateChoice.of(task_name, task_policy, chosen, task.defaults if task else None)
        jobs = [
            NewJob(
                id=ids.new_job_id(),  # its own: an answer that differs is a key's holder
                task=task_name,
                args_json=payload.encode_args(args, limit=limit),
                delay=float(chosen.get("delay") or 0.0),
                run_at=options.run_at,
                unique_key=options.key_for(args),
                unique_for=chosen.get("unique_for"),
                **self._concurrency(task, options, args),
                **rate.for_job(args),
                **resolved,
                meta_json=meta_json,
                depends_on=options.depends_on,
                on_dependency_failure=options.on_dependency_failure,
            )
            for args in args_list
        ]
        return jobs, declared, resolved

    @staticmethod
    def _bind_declared(
        task_policy: TaskPolicy, args_list: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """Arguments of an enqueue by name, bound against the parameters the task's
        workers declared: `BadArguments` naming a wrong or missing one. Unchecked when
        none are declared (a worker of an older version, or no declaration yet)."""
        signature = arguments.declared_signature(task_policy.parameters)
        if signature is None:
            return args_list
        return [arguments.bind(task_policy.name, signature, (), args) for args in args_list]

    @staticmethod
    def _concurrency(
        task: Task[Any, Any] | None, options: Options, args: Mapping[str, Any]
    ) -> dict[str, Any]:
        """A job's concurrency key and limit: the enqueue's, else the task's declared
        template filled from its arguments (a task registered here)."""
        key: str | None
        limit: int | None
        chosen = options.chosen
        if chosen.get("concurrency_key") is not None:
            key, limit = chosen.get("concurrency_key"), chosen.get("concurrency_limit")
        elif task is not None:
            key, limit = task.concurrency_for(args)
        else:
            key, limit = None, None
        return payload.check_concurrency(key, limit)

    def _enqueued(
        self,
        task_name: str,
        ids: list[str],
        declared: bool,
        resolved: dict[str, Any],
        wake_here: bool,
    ) -> tuple[list[str], TaskNotDeclaredWarning | None]:
        """After the jobs are stored: the word on an undeclared task (the warning for
        the caller), and a wake-up for a worker in this process (not for jobs that wait
        for someone else's commit)."""
        notice = None if declared else self._not_declared(task_name, ids, resolved)
        if wake_here:
            self._wake_local_workers()
        return ids, notice

    def _not_declared(
        self, task_name: str, ids: list[str], resolved: dict[str, Any]
    ) -> TaskNotDeclaredWarning | None:
        """Say that the jobs got the defaults (the event for the logs, the warning for
        the caller), and re-check: a worker that declared the task while they were being
        stored may have re-routed before they were visible (see `Store.reroute_jobs`),
        so they are re-routed here if it did, and nobody is warned."""
        if ids and self.store.task_policies([task_name]):
            self.store.reroute_jobs([task_name], job_ids=ids)
            return None
        events.emit(
            events.TASK_NOT_DECLARED,
            logging.WARNING,
            task=task_name,
            jobs=len(ids),
            queue=resolved["queue"],
            max_retries=resolved["max_retries"],
            retry_backoff=resolved["retry_backoff"],
            hint="no worker has declared this task yet: these defaults hold until one "
            "starts with it, then its waiting jobs take the task's queue and policy",
        )
        jobs = "the job takes" if len(ids) == 1 else f"the {len(ids)} jobs take"
        return TaskNotDeclaredWarning(
            f"task {task_name!r} is not declared yet (no worker has started with it): "
            f"queue {resolved['queue']!r}, max_retries {resolved['max_retries']}, backoff "
            f"{display.fmt_seconds(resolved['retry_backoff'])} hold until a worker declares "
            f"it; then {jobs} the task's queue and policy",
            task_name,
        )

    def _check_args(self, task_name: str, args: Mapping[str, Any] | None) -> dict[str, Any]:
        """Arguments given as a mapping: checked against the signature of a task
        registered here (by keyword); else as a JSON object here, and against the task's
        declared parameters once its declaration is read (`_bind_declared`)."""
        if args is not None and not isinstance(args, Mapping):
            payload.encode_args(args, limit=self.settings.max_payload_bytes)  # says why
        job_args = dict(args or {})
        task = self.tasks.get(task_name)
        return task.bind(**job_args) if task is not None else job_args

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
        return self._enqueue(task, [self._check_args(task, args)], chosen, connection)[0]

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
        checked = [self._check_args(task, args) for args in args_list]
        return self._enqueue(task, checked, chosen, connection) if checked else []

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
        checked = [self._check_args(task, args)]
        return (await self._enqueue_async(task, checked, chosen, connection))[0]

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
        checked = [self._check_args(task, args) for args in args_list]
        if not checked:
            return []
        return await self._enqueue_async(task, checked, chosen, connection)

    # -- results -------------------------------------------------------------------------
    def result(self, job_id: str, timeout: float | None = None) -> Any:
        """Wait for the job to end and return its result. Raises `JobDead` (with its last
        error) or `JobCancelled` if it ended otherwise, `ResultTimeout` if it has not
        ended within `timeout` seconds (None: wait as long as it takes), `JobNotFound`."""
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

    # -- local wake-ups: a worker in this process starts at once on its own enqueues ----
    def subscribe_wakeup(self, event: threading.Event) -> None:
        """Set `event` after every enqueue through this app (a worker in this process
        then claims at once instead of at its next poll)."""
        with self._lock:
            self._wakeups.append(event)

    def unsubscribe_wakeup(self, event: threading.Event) -> None:
        with self._lock:
            if event in self._wakeups:
                self._wakeups.remove(event)

    def _wake_local_workers(self) -> None:
        for event in list(self._wakeups):
            event.set()
