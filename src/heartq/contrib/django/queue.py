"""The queue behind one backend alias of `TASKS`: its `heartq.App`, the Django tasks
registered on it, and where each enqueue is written.

Django makes a backend object per alias and per thread; a process keeps one `TaskQueue`
per alias (`queue_for`), so its threads share one store and its pool of connections,
and a task is registered once. A change of the alias's settings (`override_settings` in
a test) makes a new one.

Where an enqueue is written (`TaskQueue.enqueue`):

- outside a transaction on Django's connection: at once, on heartq's own connection;
- inside one, with the queue in that database (`OPTIONS['DATABASE']`, the default): on
  Django's connection, in its transaction: the job exists if and only if it commits, and
  a rolled-back savepoint takes it back too;
- inside one, with the queue elsewhere (`OPTIONS['URL']`), or on a connection heartq
  cannot write on (psycopg2): at the commit (`transaction.on_commit`), as Django's own
  documentation advises. The job's id is chosen now, so the `TaskResult` returned names
  the job the commit stores (or, with a unique key already held then, the id is updated
  to the job that holds it).
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.utils import timezone

from heartq import arguments
from heartq.app import App, Task
from heartq.contrib.django import database
from heartq.contrib.django.compat import InvalidTask, InvalidTaskBackend
from heartq.contrib.django.options import REGISTERED, merged, refuse_definition_words
from heartq.contrib.django.results import POSITIONAL_META
from heartq.contrib.django.runner import runner_for
from heartq.contrib.django.task import HeartqTask
from heartq.errors import ConfigError
from heartq.options import Options, needs_a_key

BACKEND_OPTIONS = frozenset(
    {"DATABASE", "URL", "SCHEMA", "SETTINGS", "TASK_OPTIONS", "TASKS", "MODULES"}
)
"""What a heartq backend's `OPTIONS` may hold (docs/INTEGRATIONS.md#django)."""
PER_ENQUEUE = ("unique_key", "unique_for", "on_conflict")
"""Options of a task's definition that go with each of its enqueues (`unique_key`, a
template, filled from the job's arguments)."""
PLACEHOLDER_URL = "sqlite:///heartq.db"
"""The app's URL until its queue is first reached: the real one is read then
(`TaskQueue.ready_app`), so a database that cannot hold a queue (SQLite in memory, in a
test run) refuses an enqueue, not the import of the task modules."""

_queues: dict[str, TaskQueue] = {}
_queues_lock = threading.Lock()


def queue_for(alias: str, params: Mapping[str, Any]) -> TaskQueue:
    """The process's queue of the backend `alias`, made on first use, remade if its
    settings changed."""
    with _queues_lock:
        queue = _queues.get(alias)
        if queue is None or queue.params != params:
            if queue is not None:
                queue.app.close()
            queue = _queues[alias] = TaskQueue(alias, params)
        return queue


class TaskQueue:
    """One backend alias's queue (see the module's docstring)."""

    def __init__(self, alias: str, params: Mapping[str, Any]) -> None:
        self.alias = alias
        self.params = dict(params)
        options = dict(params.get("OPTIONS") or {})
        where = f"TASKS[{alias!r}]['OPTIONS']"
        for name in options:
            if name not in BACKEND_OPTIONS:
                raise InvalidTaskBackend(
                    f"{where} got {name!r}: the heartq backend takes "
                    f"{', '.join(sorted(BACKEND_OPTIONS))}"
                )
        self.url: str | None = options.get("URL")
        """A queue of its own (`OPTIONS['URL']`), or None: in `database`."""
        self.database: str = options.get("DATABASE", DEFAULT_DB_ALIAS)
        """The Django database the queue lives in, or whose commits it waits for."""
        self.schema: str | None = options.get("SCHEMA")
        self.modules: tuple[str, ...] = tuple(options.get("MODULES") or ())
        self.task_options = dict(options.get("TASK_OPTIONS") or {})
        self.per_task = {str(k): dict(v) for k, v in dict(options.get("TASKS") or {}).items()}
        try:
            refuse_definition_words(self.task_options, f"{where}['TASK_OPTIONS']")
            for path, chosen in self.per_task.items():
                refuse_definition_words(chosen, f"{where}['TASKS'][{path!r}]")
            self.app = App(PLACEHOLDER_URL, **dict(options.get("SETTINGS") or {}))
        except (InvalidTask, ConfigError) as exc:
            raise InvalidTaskBackend(str(exc)) from None
        self.override_url: str | None = None
        """A test's own queue (`heartq.contrib.django.testing`), which wins."""
        self.at_once = False
        """Enqueue at once, never at a commit (a test's queue: its transaction never
        commits, and the queue is not in it)."""
        self.definitions: dict[str, HeartqTask] = {}
        self._per_enqueue: dict[str, dict[str, Any]] = {}
        self._lock = threading.RLock()

    # -- where the queue is --------------------------------------------------------------
    @property
    def in_django_database(self) -> bool:
        """Whether the queue lives in Django's database (`database`), so an enqueue can
        join its transactions."""
        return self.url is None and self.override_url is None

    def current_url(self) -> str:
        if self.override_url is not None:
            return self.override_url
        if self.url is not None:
            return self.url
        connection = connections[self.database]
        return database.queue_url(self.database, connection.settings_dict, self.schema)

    def ready_app(self) -> App:
        """The app, pointed at the queue's URL as it is now (see `PLACEHOLDER_URL`, and
        `heartq.contrib.django.database` on why it is read each time)."""
        url = self.current_url()
        if self.app.url != url:
            with self._lock:
                if self.app.url != url:
                    self.app.use_url(url)
        return self.app

    # -- tasks ---------------------------------------------------------------------------
    def register(self, task: HeartqTask) -> Task[Any, Any]:
        """The heartq task of a Django task, registered the first time (its definition's
        options checked then: `InvalidTask`, one line)."""
        name = task.module_path
        registered = self.app.tasks.get(name)
        if registered is not None:
            return registered
        with self._lock:
            registered = self.app.tasks.get(name)
            if registered is None:
                registered = self._register(name, task)
            return registered

    def _register(self, name: str, task: HeartqTask) -> Task[Any, Any]:
        _refuse_signature(name, task)
        chosen = merged(self.task_options, self.per_task.get(name, {}), task.definition_options)
        declared = {k: v for k, v in chosen.items() if k in REGISTERED}
        per_enqueue = {k: v for k, v in chosen.items() if k in PER_ENQUEUE}
        if chosen.get("unique") is True and "unique_for" in per_enqueue:
            declared["unique_for"] = per_enqueue.pop("unique_for")  # the declared key's window
        try:
            template = chosen.get("unique_key")
            if template is not None and chosen.get("unique") is True:
                raise ConfigError(
                    "give unique=True (a key from the task and its arguments) or a "
                    "unique_key, not both"
                )
            registered = self.app.task(
                name=name, queue=task.queue_name, priority=task.priority, **declared
            )(runner_for(task))
            if template is not None:
                arguments.template_fields(template, f"{name}: unique_key", registered.signature)
            elif chosen.get("unique") is not True:
                needs_a_key(Options(**per_enqueue).chosen)  # unique_for, on_conflict: of which key?
            Options(**{**per_enqueue, "unique_key": template and "a key"})
        except ConfigError as exc:
            self.app.tasks.pop(name, None)
            said = str(exc).removeprefix(f"{name}: ")
            raise InvalidTask(f"task {name!r}: {said}") from None
        self.definitions[name] = task
        self._per_enqueue[name] = per_enqueue
        return registered

    def enqueue_options(
        self, task: HeartqTask, registered: Task[Any, Any], positional: list[str]
    ) -> dict[str, Any]:
        """heartq's options of one enqueue of `task` (a copy made by `using()` may differ
        from the definition): its queue and priority where they differ from the task's
        own, `run_after` as `eta`, the definition's unique key (a template, unless
        `using()` chose `unique` or a `unique_key`) and the options chosen with `using()`
        (an `expires` among them), and the names of the arguments passed by
        position in the job's meta."""
        definition = self.definitions[registered.name]
        chosen: dict[str, Any] = {}
        if task.queue_name != definition.queue_name:
            chosen["queue"] = task.queue_name
        if task.priority != definition.priority:
            chosen["priority"] = task.priority
        if task.run_after is not None:
            chosen["eta"] = _aware(task.run_after)
        per_enqueue = dict(self._per_enqueue[registered.name])
        caller_key = {k: task.enqueue_options.get(k) for k in ("unique", "unique_key")}
        if any(value is not None for value in caller_key.values()):
            per_enqueue.pop("unique_key", None)  # the caller's word on the key wins
            if caller_key["unique"] is False:  # no key, so no window or conflict of one
                per_enqueue.pop("unique_for", None)
                per_enqueue.pop("on_conflict", None)
        template = per_enqueue.pop("unique_key", None)
        if template is not None:
            defaults = registered.defaults

            def unique_key(args: Mapping[str, Any]) -> str | None:
                name = registered.name
                return arguments.fill_template(name, "unique_key", template, args, defaults)

            chosen["unique_key"] = unique_key
        chosen.update(per_enqueue)
        chosen.update(task.enqueue_options)
        if positional:
            chosen["meta"] = {**(chosen.get("meta") or {}), POSITIONAL_META: positional}
        return chosen

    # -- enqueue -------------------------------------------------------------------------
    def enqueue(
        self, name: str, job_args: dict[str, Any], options: dict[str, Any]
    ) -> tuple[str, PendingEnqueue | None]:
        """Store one job, its arguments bound already (`Task.bind`), as heartq's own
        `Task.enqueue` does (see the module's docstring for where); its id, and the
        on-commit callback's holder of the final id (None when stored now)."""
        app = self.ready_app()
        chosen = Options.given("Task.enqueue", options)
        connection = connections[self.database]
        if self.at_once or not _in_transaction(connection):
            return app.producer.enqueue(name, [job_args], chosen)[0], None
        if self.in_django_database:
            connection.ensure_connection()
            raw = connection.connection
            if database.joinable(connection.vendor, raw):
                return app.producer.enqueue(name, [job_args], chosen, raw)[0], None
        made = app.producer.make(name, [job_args], chosen)
        job_id = str(made.jobs[0].id)
        pending = PendingEnqueue(job_id)

        def at_commit() -> None:
            (stored,) = app.producer.enqueue_made(made, [job_args], chosen)
            pending.stored(stored)

        transaction.on_commit(at_commit, using=self.database)
        return job_id, pending


class PendingEnqueue:
    """The id of a job stored at a commit, and the results that name it: a unique key
    held by another job at the commit makes the enqueue answer that job (its id then
    replaces the one given)."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.results: list[Any] = []

    def stored(self, job_id: str) -> None:
        if job_id != self.job_id:
            for result in self.results:
                object.__setattr__(result, "id", job_id)


def _in_transaction(connection: Any) -> bool:
    """Whether Django's connection is in a transaction: an atomic block, or autocommit
    turned off by hand (`transaction.set_autocommit(False)`) on an open connection."""
    if connection.in_atomic_block:
        return True
    return connection.connection is not None and not connection.get_autocommit()


def _refuse_signature(name: str, task: HeartqTask) -> None:
    """A job stores its arguments by name, and heartq hands its `JobContext` to a
    parameter named `ctx`: a task that takes `*args` or positional-only parameters, or a
    parameter of its own named `ctx`, cannot be run as written (`InvalidTask`)."""
    parameters = list(inspect.signature(task.func).parameters.values())
    if task.takes_context:
        parameters = parameters[1:]
    for parameter in parameters:
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            why = f"it takes *{parameter.name}, and a job stores its arguments by name"
        elif parameter.kind is inspect.Parameter.POSITIONAL_ONLY:
            why = f"{parameter.name!r} is positional-only, and a job stores its arguments by name"
        elif parameter.name == arguments.CONTEXT_PARAMETER:
            why = "heartq passes its JobContext to a parameter named 'ctx': rename it"
        else:
            continue
        raise InvalidTask(f"task {name!r} cannot run on heartq: {why}")


def _aware(moment: datetime) -> datetime:
    """`run_after` as heartq takes an eta: aware (a naive one, allowed by Django without
    `USE_TZ`, is in the current time zone)."""
    return moment if timezone.is_aware(moment) else timezone.make_aware(moment)
