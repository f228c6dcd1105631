"""`App` and `Task`: the client side of heartq (register tasks, enqueue, inspect, cancel).

An `App` is cheap to create and opens its store lazily, so a module can define one at
import time. Producers need not import the task code: `app.enqueue("name", {...})` works
for any task name, with the defaults of `@app.task` when the task is registered here.
"""

from __future__ import annotations

import inspect
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, overload

from heartq import payload
from heartq.config import Settings, resolve_url
from heartq.errors import ConfigError
from heartq.retry import DEFAULT_MAX_RETRIES, DEFAULT_RETRY_BACKOFF, DEFAULT_RETRY_BACKOFF_MAX
from heartq.store import Store, open_store, redact
from heartq.store.interface import CancelResult, NewJob

DEFAULT_QUEUE = "default"
"""Defaults to the queue named `default`."""


class Task:
    """A registered task: call `.enqueue(**kwargs)` to queue it, or call it directly."""

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
        self.is_async = inspect.iscoroutinefunction(fn)
        self.wants_ctx = "ctx" in inspect.signature(fn).parameters
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", name)
        self.__module__ = fn.__module__
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the function in the caller, as plain Python (handy in tests)."""
        return self.fn(*args, **kwargs)

    def enqueue(self, **kwargs: Any) -> str:
        """Queue one job with these keyword arguments; returns its id."""
        return self.app.enqueue(self.name, kwargs)

    def enqueue_with(self, args: Mapping[str, Any] | None = None, **options: Any) -> str:
        """Queue one job with options (`queue`, `priority`, `delay`, `max_retries`)."""
        return self.app.enqueue(self.name, dict(args or {}), **options)

    def enqueue_many(self, args_list: Iterable[Mapping[str, Any]], **options: Any) -> list[str]:
        return self.app.enqueue_many(self.name, args_list, **options)

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.queue}>"


class App:
    """The entry point: where the queue lives, its settings, and the registered tasks."""

    def __init__(self, url: str | None = None, **settings: Any) -> None:
        self.url = resolve_url(url)
        self.settings = Settings.from_env(**settings)
        self.tasks: dict[str, Task] = {}
        self._store: Store | None = None
        self._store_pid = -1
        self._lock = threading.Lock()
        self._wakeups: list[threading.Event] = []

    def __repr__(self) -> str:
        return f"<heartq.App {redact(self.url)} tasks={sorted(self.tasks)}>"

    # -- the store, opened lazily and once per process -----------------------------------
    @property
    def store(self) -> Store:
        with self._lock:
            if self._store is None or self._store_pid != os.getpid():
                self._store = open_store(self.url)
                self._store_pid = os.getpid()
            return self._store

    def use_url(self, url: str) -> None:
        """Point this app at another queue (the command line's `--url`)."""
        with self._lock:
            if self._store is not None and self._store_pid == os.getpid():
                self._store.close()
            self._store = None
            self.url = url

    def migrate(self) -> int:
        return self.store.migrate()

    def close(self) -> None:
        with self._lock:
            if self._store is not None and self._store_pid == os.getpid():
                self._store.close()
            self._store = None

    # -- tasks ---------------------------------------------------------------------------
    @overload
    def task(self, fn: Callable[..., Any], /) -> Task: ...

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
    ) -> Callable[[Callable[..., Any]], Task]: ...

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
    ) -> Task | Callable[[Callable[..., Any]], Task]:
        """Register a function (sync or `async def`) as a task. Its name defaults to the
        function's `__name__`; a second task with the same name is an error."""

        def register(func: Callable[..., Any]) -> Task:
            task = Task(
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
            )
            if task.name in self.tasks:
                raise ConfigError(f"a task named {task.name!r} is already registered")
            self.tasks[task.name] = task
            return task

        return register(fn) if fn is not None else register

    # -- enqueue -------------------------------------------------------------------------
    def _new_job(
        self,
        task_name: str,
        args: Mapping[str, Any] | None,
        queue: str | None,
        priority: int | None,
        delay: float | None,
        max_retries: int | None,
    ) -> NewJob:
        payload.check_name("task", task_name)
        task = self.tasks.get(task_name)
        if queue is None:
            queue = task.queue if task else DEFAULT_QUEUE
        queue = payload.check_name("queue", queue)
        payload.check_duration("delay", delay, allow_zero=True)
        payload.check_int("max_retries", max_retries, minimum=0)
        payload.check_int("priority", priority)
        return NewJob(
            task=task_name,
            args_json=payload.encode_args(args, limit=self.settings.max_payload_bytes),
            queue=queue,
            priority=priority if priority is not None else (task.priority if task else 0),
            delay=float(delay or 0.0),
            max_retries=(
                max_retries
                if max_retries is not None
                else (task.max_retries if task else DEFAULT_MAX_RETRIES)
            ),
            retry_backoff=task.retry_backoff if task else DEFAULT_RETRY_BACKOFF,
            retry_backoff_max=task.retry_backoff_max if task else DEFAULT_RETRY_BACKOFF_MAX,
        )

    def enqueue(
        self,
        task: str,
        args: Mapping[str, Any] | None = None,
        *,
        queue: str | None = None,
        priority: int | None = None,
        delay: float | None = 0.0,
        max_retries: int | None = None,
    ) -> str:
        """Queue one job; returns its id. Bad input raises before anything is stored."""
        job = self._new_job(task, args, queue, priority, delay, max_retries)
        job_id = self.store.enqueue([job])[0]
        self._wake_local_workers()
        return job_id

    def enqueue_many(
        self,
        task: str,
        args_list: Iterable[Mapping[str, Any]],
        *,
        queue: str | None = None,
        priority: int | None = None,
        delay: float | None = 0.0,
        max_retries: int | None = None,
    ) -> list[str]:
        """Queue many jobs of one task in one transaction: all of them, or none."""
        jobs = [self._new_job(task, a, queue, priority, delay, max_retries) for a in args_list]
        ids = self.store.enqueue(jobs)
        self._wake_local_workers()
        return ids

    # -- inspect and control -------------------------------------------------------------
    def get_job(self, job_id: str) -> dict[str, Any]:
        """The job as `heartq jobs show ID --json` prints it. Raises `JobNotFound`."""
        return self.store.get_job(job_id)

    def cancel(self, job_id: str) -> CancelResult:
        """Cancel a queued job at once, or ask a running job's worker to stop it."""
        return self.store.cancel_job(job_id)

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
