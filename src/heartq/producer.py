"""The producer: every job made and stored the one way, whoever enqueues it.

`App.enqueue` and its variants (`Task.enqueue`, the command line's, the asyncio ones),
a pipeline (`heartq.pipelines`) and a schedule's ticks (`heartq.maintenance.scheduler`)
make their jobs here, from a task, its arguments and the enqueue's options
(`Producer.make`: the task's policy, registered here or declared by its workers, each
job's id, unique key, concurrency and rate keys, eta and meta), and store them through
one sequence (`Producer.storing`): the enqueue hooks' before parts (they may change a
job's `meta`), the store's write (the caller's: a plain enqueue, an asyncio
connection's, a tick's transaction), the hooks' after parts told each job's id, then a
wake-up on the transport for each job runnable now. So a job behaves the same however
it was enqueued, and a change to that sequence is made once.

What the producer reads of its app (`EnqueuingApp`) and of a task registered there
(`RegisteredTask`) are protocols that `heartq.App` and `heartq.Task` satisfy: neither
this module nor `heartq.pipelines` imports the app, which imports both.

Unique keys at enqueue (`refuse_collisions`, `check_conflicts`): a job with a
`unique_key` is stored only while no other job holds the key (queued, waiting or running,
or finished within its `unique_for`); otherwise the enqueue answers the holder's id (the
store decides, in the statement that would insert it). Two things the store cannot tell
its caller are decided here, around it:

- A batch (`enqueue_many`) whose jobs share a key: only the first could be stored, and
  the others would answer its id. That is what the caller meant when the jobs are the
  same job (one key for the whole batch of one job's repeats); when they differ (other
  arguments, another queue), the others' differences would be dropped without a word,
  so the batch is refused before anything is stored.
- Whether an id answered is the job just made or a holder: the app gives each job its id
  before storing it, so an answer that differs is a holder's. With `on_conflict="raise"`
  the caller hears of it (`heartq.AlreadyEnqueued`); the default answers quietly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import logging
import math
import os
import sys
import threading
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from heartq import arguments, display, events, ids, payload, policy
from heartq.config import Settings
from heartq.errors import AlreadyEnqueued, ConfigError, TaskNotDeclared, TaskNotDeclaredWarning
from heartq.hooks import EnqueueRun, Hooks, hooked_enqueue
from heartq.model import NewJob, TaskPolicy
from heartq.options import Options, needs_a_key
from heartq.periodic import TICK_UNIQUE_FOR, Schedule
from heartq.store import Store

if TYPE_CHECKING:
    from heartq.event_stream import EventStream
    from heartq.transport.nats import NatsTransport


class RegisteredTask(Protocol):
    """A task registered in an app (`heartq.Task`), as its jobs are made from it: its
    name, the signature its arguments are bound against, its policy and defaults, and
    the app it belongs to."""

    @property
    def name(self) -> str: ...

    @property
    def signature(self) -> inspect.Signature: ...

    @property
    def policy(self) -> TaskPolicy: ...

    @property
    def defaults(self) -> dict[str, Any]: ...

    @property
    def app(self) -> EnqueuingApp: ...

    def concurrency_for(self, args: Mapping[str, Any]) -> tuple[str | None, int | None]: ...

    def fair_key_for(self, args: Mapping[str, Any]) -> str | None: ...

    @property
    def fair_weight(self) -> float | None: ...

    def bind(self, *args: Any, **kwargs: Any) -> dict[str, Any]: ...


class EnqueuingApp(Protocol):
    """An app (`heartq.App`), as its producer reads it: the tasks registered there, its
    settings, events and hooks, its store and transport (read at each enqueue: the command line
    points an app at another queue), and the producer itself."""

    @property
    def tasks(self) -> Mapping[str, RegisteredTask]: ...

    @property
    def strict_tasks(self) -> bool: ...

    @property
    def settings(self) -> Settings: ...

    @property
    def events(self) -> EventStream: ...

    @property
    def hooks(self) -> Hooks: ...

    @property
    def store(self) -> Store: ...

    @property
    def transport_url(self) -> str | None: ...

    @property
    def transport(self) -> NatsTransport | None: ...

    @property
    def producer(self) -> Producer: ...


class Made(NamedTuple):
    """The jobs of one enqueue of a task, whether the task is declared (or registered
    here), and its policy as resolved with the enqueue's options (what a warning about a
    task not declared yet tells)."""

    task: str
    jobs: list[NewJob]
    declared: bool
    resolved: dict[str, Any]


class Waker(Protocol):
    """A worker of this process that hears of its app's enqueues (`subscribe_wakeup`):
    told when jobs are runnable now, and when a delayed one falls due
    (`heartq.worker.wakeups.DueWakeups`)."""

    def set(self) -> None:
        """Jobs were enqueued runnable now."""
        ...

    def due_in(self, seconds: float) -> None:
        """A job was enqueued that falls due `seconds` from now (a delay, an eta)."""
        ...


class Producer:
    """Makes an app's jobs and stores them (see the module's docstring), and wakes the
    workers of this process that subscribed to its enqueues."""

    def __init__(self, app: EnqueuingApp) -> None:
        self.app = app
        self._lock = threading.Lock()
        self._wakeups: list[Waker] = []

    # -- making jobs ---------------------------------------------------------------------
    def check_args(self, task_name: str, args: Mapping[str, Any] | None) -> dict[str, Any]:
        """Arguments given as a mapping: checked against the signature of a task
        registered here (by keyword); else as a JSON object here, and against the task's
        declared parameters once its declaration is read (`_bind_declared`)."""
        if args is not None and not isinstance(args, Mapping):
            payload.encode_args(args, limit=self.app.settings.max_payload_bytes)  # says why
        job_args = dict(args or {})
        task = self.app.tasks.get(task_name)
        return task.bind(**job_args) if task is not None else job_args

    def make(
        self,
        task_name: str,
        args_list: list[dict[str, Any]],
        options: Options,
        bound: bool = False,
        step: bool = False,
    ) -> Made:
        """The jobs to store, one per arguments, with the task's policy resolved.
        `bound`: the arguments were bound against the task's function already (a
        pipeline's signature; a task registered here always is). `step`: the jobs are a
        pipeline's, which a task's `unique=True` does not key (`_uniqueness`)."""
        payload.check_name("task", task_name)
        task_policy, declared = self._policy_for(task_name)
        task = self.app.tasks.get(task_name)
        if task is None and not bound:
            args_list = self._bind_declared(task_policy, args_list)
        chosen = options.chosen
        resolved = policy.resolve(
            task_policy, chosen.get("queue"), chosen.get("priority"), chosen.get("max_retries")
        )
        limit = self.app.settings.max_payload_bytes
        meta_json = payload.encode_meta(chosen.get("meta") or {}, limit=limit)
        defaults = task.defaults if task else arguments.declared_defaults(task_policy.parameters)
        rate = policy.RateChoice.of(task_name, task_policy, chosen, defaults)
        derived, unique_for = _uniqueness(task_policy, options, step)
        expires_in = _expiry(task_policy, options)
        jobs = []
        for args in args_list:
            args_json = payload.encode_args(args, limit=limit)
            key = options.key_for(args)
            if derived:
                key = arguments.unique_args_key(task_name, args_json)
            jobs.append(
                NewJob(
                    id=ids.new_job_id(),  # its own: an answer that differs is a key's holder
                    task=task_name,
                    args_json=args_json,
                    delay=float(chosen.get("delay") or 0.0),
                    run_at=options.run_at,
                    unique_key=key,
                    unique_for=unique_for,
                    **self._concurrency(task, options, args),
                    **self._fairness(task, options, args),
                    **rate.for_job(args),
                    **resolved,
                    meta_json=meta_json,
                    expires_in=expires_in,
                    depends_on=options.depends_on,
                    on_dependency_failure=options.on_dependency_failure,
                )
            )
        return Made(task_name, jobs, declared, resolved)

    def _policy_for(self, task_name: str) -> tuple[TaskPolicy, bool]:
        """The policy a new job of this task takes, and whether the task is declared (or
        registered here); strict mode refuses a task that is neither."""
        task = self.app.tasks.get(task_name)
        if task is not None:
            return task.policy, True
        declared = self.app.store.task_policies([task_name]).get(task_name)
        if declared is not None:
            return declared, True
        if self.app.strict_tasks:
            raise TaskNotDeclared(task_name)
        return policy.defaults(task_name), False

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
        task: RegisteredTask | None, options: Options, args: Mapping[str, Any]
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

    @staticmethod
    def _fairness(
        task: RegisteredTask | None, options: Options, args: Mapping[str, Any]
    ) -> dict[str, Any]:
        """A job's fairness key and weight: the enqueue's, else its task's (a task
        registered here: the template filled from its arguments, and its weight)."""
        chosen = options.chosen
        key = chosen.get("fair_key")
        weight = chosen.get("fair_weight")
        if task is not None:
            if key is None:
                key = task.fair_key_for(args)
            if weight is None and key is not None:
                weight = task.fair_weight
        return payload.check_fair(key, weight)

    # -- the one sequence every store of new jobs goes through ---------------------------
    @contextlib.contextmanager
    def storing(
        self, jobs: list[NewJob], args_list: Sequence[Mapping[str, Any]], *, publish: bool
    ) -> Iterator[EnqueueRun]:
        """Around the store's write of `jobs` (made from `args_list`): the enqueue hooks'
        before parts first (outside any transaction), then the block writes `run.jobs`
        (as the hooks left them) and tells `run.stored` the ids, the hooks' after parts
        hear them, and once the block is done (committed), `publish`: a wake-up on the
        transport for each job runnable now (`_publish`). An error in the block reaches
        the hooks and the caller; nothing is published."""
        limit = self.app.settings.max_payload_bytes
        with hooked_enqueue(self.app.hooks.enqueue, jobs, args_list, limit=limit) as run:
            yield run
        if publish and self.app.transport_url is not None:
            self._publish(run.jobs, run.ids)

    def _publish(self, jobs: Sequence[NewJob], ids: Sequence[str | None]) -> None:
        """After the commit, a wake-up for each job runnable now: the database is the
        outbox, so a failed publish loses nothing (a worker's sweeper publishes what
        stays queued, and delayed jobs when due). Jobs with a concurrency key are left to
        the database claim, which counts their key; transactional enqueues
        (`connection=`) to the sweeper, as their commit is the caller's; jobs with
        dependencies too (the sweeper publishes them once settled). A job with a rate
        key is published as a wake-up only: the claim by id never takes it, so the worker
        that hears it claims from the database at once, which counts its key."""
        transport = self.app.transport
        assert transport is not None
        due = [
            (job_id, job.queue)
            for job, job_id in zip(jobs, ids, strict=True)
            if job_id is not None
            and job.delay <= 0
            and job.concurrency_key is None
            and not job.depends_on
        ]
        transport.publish_later(due)

    def _write(
        self, jobs: list[NewJob], args_list: Sequence[Mapping[str, Any]], connection: Any
    ) -> list[str]:
        """The jobs stored through `storing`, by the store's blocking enqueue (in the
        caller's open transaction with a connection: published only without one)."""
        with self.storing(jobs, args_list, publish=connection is None) as run:
            stored = self.app.store.enqueue(run.jobs, connection=connection)
            run.stored(stored)
        return stored

    @contextlib.contextmanager
    def tick_jobs(self, schedule: Schedule, ticks: Iterable[float]) -> Iterator[EnqueueRun]:
        """The jobs of a schedule's ticks (`heartq.periodic.MakeTickJobs`): its task's
        with its arguments, each keyed by its tick so the fleet makes it once, stored by
        the scheduler's transaction inside `storing` like any enqueue's (not published:
        the sweeper publishes them)."""
        made = []
        for tick in ticks:
            key = schedule.tick_key(tick)
            if schedule.queue is None:  # the task's queue
                options = Options(unique_key=key, unique_for=TICK_UNIQUE_FOR)
            else:
                options = Options(unique_key=key, unique_for=TICK_UNIQUE_FOR, queue=schedule.queue)
            (job,) = self.make(schedule.task, [dict(schedule.args)], options).jobs
            made.append(dataclasses.replace(job, schedule=schedule.name))
        with self.storing(made, [dict(schedule.args) for _ in made], publish=False) as run:
            yield run

    # -- enqueues: one task's jobs, or a pipeline's --------------------------------------
    def enqueue(
        self,
        task_name: str,
        args_list: list[dict[str, Any]],
        options: Options,
        connection: Any = None,
    ) -> list[str]:
        """Every enqueue of one task comes here (`App.enqueue` and the others): makes
        and stores its jobs, wakes, and warns the caller of a task not declared yet
        (`TaskNotDeclaredWarning`)."""
        stored, notices = self._enqueue(task_name, args_list, options, connection)
        _warn_caller(notices)
        return stored

    def _enqueue(
        self,
        task_name: str,
        args_list: list[dict[str, Any]],
        options: Options,
        connection: Any = None,
    ) -> tuple[list[str], list[TaskNotDeclaredWarning]]:
        """Store the jobs: their ids, and the warnings their caller gets (none: the task
        is declared). With a connection, the jobs are written in its open transaction;
        workers hear of them when it commits (PostgreSQL's NOTIFY), or at their next poll
        (SQLite)."""
        made = self.make(task_name, args_list, options)
        return self._store_made(made, args_list, options, connection)

    def enqueue_made(
        self,
        made: Made,
        args_list: list[dict[str, Any]],
        options: Options,
        connection: Any = None,
    ) -> list[str]:
        """Store jobs `make` made earlier, with the ids chosen then, as `enqueue` stores
        its own: for a caller that must name a job before it is stored (a framework that
        stores it at its transaction's commit: `heartq.contrib.django`). The ids answered
        are those ids, or those of the jobs holding their unique keys by then."""
        stored, notices = self._store_made(made, args_list, options, connection)
        _warn_caller(notices)
        return stored

    def _store_made(
        self, made: Made, args_list: list[dict[str, Any]], options: Options, connection: Any
    ) -> tuple[list[str], list[TaskNotDeclaredWarning]]:
        refuse_collisions(made.jobs)
        stored = self._write(made.jobs, args_list, connection)
        notices = self._settle([made], made.jobs, stored, wake=connection is None)
        check_conflicts(made.jobs, stored, options)
        return stored, notices

    async def enqueue_async(
        self,
        task_name: str,
        args_list: list[dict[str, Any]],
        options: Options,
        connection: Any = None,
    ) -> list[str]:
        """`enqueue` for asyncio code: its round trips off the event loop, or on an
        asyncio connection's own (a `psycopg.AsyncConnection`). The warning is given
        here, in the caller's coroutine, so it names the caller's line."""
        # Imported here, on the event loop that runs this, where asyncio is loaded already:
        # a process that never enqueues from asyncio code (a command) does not pay for it.
        import asyncio

        if connection is None:
            stored, notices = await asyncio.to_thread(self._enqueue, task_name, args_list, options)
        elif not inspect.iscoroutinefunction(getattr(connection, "execute", None)):
            # a plain connection belongs to its thread (sqlite3 checks): used right here
            stored, notices = self._enqueue(task_name, args_list, options, connection)
        else:
            made = await asyncio.to_thread(self.make, task_name, args_list, options)
            refuse_collisions(made.jobs)
            with self.storing(made.jobs, args_list, publish=False) as run:
                stored = await self.app.store.enqueue_async(run.jobs, connection)
                run.stored(stored)
            notices = await asyncio.to_thread(self._settle, [made], made.jobs, stored, wake=False)
            check_conflicts(made.jobs, stored, options)
        _warn_caller(notices)
        return stored

    def enqueue_pipeline(
        self,
        made: Sequence[Made],
        args_list: list[dict[str, Any]],
        connection: Any = None,
    ) -> list[str]:
        """Store the jobs of a pipeline (`heartq.pipelines`: of any tasks, each of one
        `make`, their dependencies set) in one transaction, as `enqueue` stores one
        task's: hooks, wake-ups, and a warning per task not declared yet."""
        jobs = [job for one in made for job in one.jobs]
        stored = self._write(jobs, args_list, connection)
        _warn_caller(self._settle(made, jobs, stored, wake=connection is None))
        return stored

    def _settle(
        self, made: Sequence[Made], jobs: Sequence[NewJob], stored: Sequence[str], *, wake: bool
    ) -> list[TaskNotDeclaredWarning]:
        """After the jobs are stored: the word on each task not declared yet (the
        warnings for the caller), and a wake-up for a worker in this process (not for
        jobs that wait for someone else's commit)."""
        undeclared = {one.task: one.resolved for one in reversed(made) if not one.declared}
        notices = []
        for task_name in dict.fromkeys(one.task for one in made):
            if task_name in undeclared:
                mine = [i for job, i in zip(jobs, stored, strict=True) if job.task == task_name]
                notice = self._not_declared(task_name, mine, undeclared[task_name])
                if notice is not None:
                    notices.append(notice)
        if wake:
            self.wake_local_workers(jobs)
        return notices

    def _not_declared(
        self, task_name: str, stored: list[str], resolved: dict[str, Any]
    ) -> TaskNotDeclaredWarning | None:
        """Say that the jobs got the defaults (the event for the logs, the warning for
        the caller), and re-check: a worker that declared the task while they were being
        stored may have re-routed before they were visible (see `Store.reroute_jobs`),
        so they are re-routed here if it did, and nobody is warned."""
        store = self.app.store
        if stored and store.task_policies([task_name]):
            store.reroute_jobs([task_name], job_ids=stored)
            return None
        self.app.events.emit(
            events.TASK_NOT_DECLARED,
            logging.WARNING,
            task=task_name,
            jobs=len(stored),
            queue=resolved["queue"],
            max_retries=resolved["max_retries"],
            retry_backoff=resolved["retry_backoff"],
            hint="no worker has declared this task yet: these defaults hold until one "
            "starts with it, then its waiting jobs take the task's queue and policy",
        )
        jobs = "the job takes" if len(stored) == 1 else f"the {len(stored)} jobs take"
        return TaskNotDeclaredWarning(
            f"task {task_name!r} is not declared yet (no worker has started with it): "
            f"queue {resolved['queue']!r}, max_retries {resolved['max_retries']}, backoff "
            f"{display.fmt_seconds(resolved['retry_backoff'])} hold until a worker declares "
            f"it; then {jobs} the task's queue and policy",
            task_name,
        )

    # -- local wake-ups: a worker in this process starts at once on its own enqueues, ----
    # -- and when its delayed ones fall due ----------------------------------------------
    def subscribe_wakeup(self, waker: Waker) -> None:
        with self._lock:
            self._wakeups.append(waker)

    def unsubscribe_wakeup(self, waker: Waker) -> None:
        with self._lock:
            if waker in self._wakeups:
                self._wakeups.remove(waker)

    def wake_local_workers(self, jobs: Sequence[NewJob]) -> None:
        """Tell this process's workers of `jobs`, just stored: at once if any is runnable
        now, and when the soonest delayed one falls due (a job that waits for others
        is released by their end, not by a clock)."""
        if not self._wakeups:
            return
        now = time.time()
        runnable, soonest = False, math.inf
        for job in jobs:
            if job.depends_on:
                continue
            delay = job.delay if job.run_at is None else job.run_at - now
            if delay > 0:
                soonest = min(soonest, delay)
            else:
                runnable = True
        for waker in list(self._wakeups):
            if runnable:
                waker.set()
            if soonest < math.inf:
                waker.due_in(soonest)


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
"""heartq's own files: a warning names the first line outside them (the caller's)."""


def _warn_caller(notices: Sequence[Warning]) -> None:
    """`warnings.warn` naming the caller's line: the first frame outside heartq (what
    Python 3.12's `skip_file_prefixes` does; written here for 3.11)."""
    for warning in notices:
        frame, level = sys._getframe(1), 2
        while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
            frame, level = frame.f_back, level + 1
        warnings.warn(warning, stacklevel=level)


# -- expiry -----------------------------------------------------------------------------
def _expiry(task_policy: TaskPolicy, options: Options) -> float | None:
    """Seconds from now by which an enqueue's jobs must have started: the caller's
    `expires`, else the task's own, counted from when the jobs are first due (their
    `delay` or `eta`: a task's expiry says how late a job may start, and a job the
    caller put off on purpose is not late yet), else none."""
    if options.expires_in is not None or task_policy.expires is None:
        return options.expires_in
    run_at = options.run_at
    due_in = float(options.chosen.get("delay") or 0.0) if run_at is None else run_at - time.time()
    return max(due_in, 0.0) + task_policy.expires


# -- unique keys ------------------------------------------------------------------------
def _uniqueness(task_policy: TaskPolicy, options: Options, step: bool) -> tuple[bool, float | None]:
    """Whether an enqueue's jobs are keyed by their task and arguments
    (`arguments.unique_args_key`), and the window of their keys (`unique_for`). The
    caller's word first: its `unique_key` (never derived), or `unique=True`/`False`;
    else the task's declared `unique=True` keys the jobs of a plain enqueue, not those
    that wait for others (`depends_on`, a pipeline's `step`: an enqueue answered by
    another job's id would leave what waits for it to a job never stored). The window is
    the caller's `unique_for`, else the task's."""
    chosen = options.chosen
    window = chosen.get("unique_for")
    if chosen.get("unique_key") is not None:
        return False, window
    unique = chosen.get("unique")
    if unique is None:
        unique = task_policy.unique and not step and not options.depends_on
    if not unique:
        needs_a_key(chosen)
    if window is None and unique and task_policy.unique:
        window = task_policy.unique_for
    return bool(unique), window


def refuse_collisions(jobs: Sequence[NewJob]) -> None:
    """`ConfigError` for a batch in which jobs that differ share a unique key."""
    first: dict[str, tuple[int, NewJob]] = {}
    for n, job in enumerate(jobs):
        if job.unique_key is None:
            continue
        same = dataclasses.replace(job, id=None)
        if job.unique_key not in first:
            first[job.unique_key] = (n, same)
        elif first[job.unique_key][1] != same:
            raise ConfigError(
                f"jobs {first[job.unique_key][0]} and {n} of the batch share unique key "
                f"{job.unique_key!r} but differ (arguments {first[job.unique_key][1].args_json} "
                f"and {job.args_json}): only one could be stored; nothing was"
            )


def check_conflicts(jobs: Sequence[NewJob], ids: Sequence[str], options: Options) -> None:
    """After the store answered `ids` for `jobs` (made with their own ids): with
    `on_conflict="raise"`, `AlreadyEnqueued` for the first job that met a holder of its
    key (a job a batch repeats answers the id of its first, which is not a holder)."""
    if options.chosen.get("on_conflict") != "raise":
        return
    made = {job.id for job in jobs}
    for job, job_id in zip(jobs, ids, strict=True):
        if job.unique_key is not None and job_id != job.id and job_id not in made:
            raise AlreadyEnqueued(job_id, job.unique_key, ids)
