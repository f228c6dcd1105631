"""A task's definition: its function and its options, checked once, and the policy its
workers declare to the database from them (`TaskDefinition.policy`).

What a task is needs no app: the options are checked where the task is defined, and the
worker reads the function and the policy. `heartq.Task` (`heartq.app`) is a definition
with the app it belongs to, which adds how its jobs are enqueued.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict, Unpack

from heartq import arguments, payload, rates
from heartq.errors import ConfigError
from heartq.lifecycle.retry import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_MAX_SNOOZES,
    DEFAULT_RETRY_BACKOFF,
    DEFAULT_RETRY_BACKOFF_MAX,
    EXPONENTIAL,
    Backoff,
    ExceptionClasses,
    RetryDelay,
    RetryOn,
    check_retry_delay,
    retry_intervals,
)
from heartq.model import TaskPolicy
from heartq.policy import DEFAULT_QUEUE


class TaskOptions(TypedDict, total=False):
    """A task's options, written once: `App.task(...)` takes them (`**options`), the
    Django backend passes them through, `TaskDefinition` checks each and gives the ones
    left out their defaults (`App.task`'s docstring says what each does)."""

    name: str
    """Defaults to the function's `__name__`."""
    queue: str
    """Defaults to `default`."""
    max_retries: int
    """Defaults to 3: attempts after the first, so 4 in all (BullMQ's `attempts` and
    Oban's `max_attempts` count the first: theirs minus one)."""
    timeout: float | None
    heartbeat_timeout: float | None
    retry_backoff: float
    """Defaults to 5 s."""
    retry_backoff_max: float
    """Defaults to an hour."""
    priority: int
    """Defaults to 0; higher runs first (the reverse of BullMQ, Oban and Celery on
    Redis: negate theirs)."""
    concurrency_key: str | None
    concurrency_limit: int | None
    rate_limit: str | None
    rate_key: str | None
    fair_key: str | None
    """A template like `concurrency_key`'s: its jobs' share of their queue's slots
    (`App.task`)."""
    fair_weight: float | None
    """With `fair_key`: its keys' weight (None: 1)."""
    retry_on: ExceptionClasses
    dont_retry_on: ExceptionClasses
    retry_schedule: str
    """Defaults to exponential."""
    retry_jitter: bool
    """Defaults to True (False with `retry_intervals`: the waits as listed)."""
    max_snoozes: int
    """Defaults to 100: a job's snoozes (`heartq.Snooze`) not counted as attempts."""
    retry_intervals: Sequence[float] | None
    """The wait after each failed attempt in turn, the last repeated: replaces
    `retry_backoff`, `retry_backoff_max` and `retry_schedule`."""
    unique: bool
    """Defaults to False. True: each job an enqueue makes is keyed by the task and its
    arguments (`heartq.arguments.unique_args_key`), declared, so enqueues by name are too."""
    unique_for: float | None
    """With `unique`: a job with the same arguments that finished within this many
    seconds answers too (None: only one queued or running)."""
    retry_delay: RetryDelay | None
    """`fn(attempt, exc)`: the wait before the next attempt, asked by the worker where the
    code raised; None (or a failure of its own): the task's other rules."""
    expires: float | None
    """Defaults to None (no expiry). Seconds: each job of the task must have started
    within that long of when it was first due (its enqueue, or its `delay`/`eta`), else it
    ends cancelled, never run; an enqueue's own `expires=` wins. Declared, so enqueues by
    name take it too."""


class TaskDefinition:
    """A task as defined: its function, and its options checked once (a bad one raises
    `ConfigError` where the task is defined). Calling it runs the function here, as
    plain Python. `heartq.Task` is this with the app it belongs to."""

    def __init__(self, fn: Callable[..., Any], **options: Unpack[TaskOptions]) -> None:
        unknown = sorted(set(options) - set(TaskOptions.__annotations__))
        if unknown:  # a TypedDict is a type checker's: a misspelt option still arrives
            raise ConfigError(
                f"unknown task option {unknown[0]!r}; a task takes "
                + ", ".join(TaskOptions.__annotations__)
            )
        name = options.get("name") or str(getattr(fn, "__name__", ""))
        queue = options.get("queue", DEFAULT_QUEUE)
        max_retries = options.get("max_retries", DEFAULT_MAX_RETRIES)
        max_snoozes = options.get("max_snoozes", DEFAULT_MAX_SNOOZES)
        timeout = options.get("timeout")
        heartbeat_timeout = options.get("heartbeat_timeout")
        retry_backoff = options.get("retry_backoff", DEFAULT_RETRY_BACKOFF)
        retry_backoff_max = options.get("retry_backoff_max", DEFAULT_RETRY_BACKOFF_MAX)
        priority = options.get("priority", 0)
        concurrency_key = options.get("concurrency_key")
        concurrency_limit = options.get("concurrency_limit")
        rate_limit = options.get("rate_limit")
        rate_key = options.get("rate_key")
        fair_key = options.get("fair_key")
        fair_weight = options.get("fair_weight")
        self.fn = fn
        self.name = payload.check_name("task", name)
        self.queue = payload.check_name("queue", queue)
        payload.check_int("max_retries", max_retries, minimum=0)
        payload.check_int("max_snoozes", max_snoozes, minimum=0)
        payload.check_int("priority", priority)
        payload.check_duration("timeout", timeout)
        payload.check_duration("heartbeat_timeout", heartbeat_timeout)
        payload.check_duration("retry_backoff", retry_backoff, allow_zero=True)
        payload.check_duration("retry_backoff_max", retry_backoff_max, allow_zero=True)
        self.max_retries = max_retries
        self.max_snoozes = max_snoozes
        """A job's first `max_snoozes` snoozes are not counted as attempts; each one
        after is a failed attempt (its worker's own bound: not declared)."""
        self.timeout = timeout
        self.heartbeat_timeout = heartbeat_timeout
        self.retry_backoff = retry_backoff
        self.retry_backoff_max = retry_backoff_max
        self.priority = priority
        self.signature = arguments.call_signature(fn)
        self.concurrency_key, self.concurrency_limit = concurrency_key, concurrency_limit
        if concurrency_key is not None:
            payload.check_concurrency(concurrency_key, concurrency_limit)
            arguments.template_fields(concurrency_key, f"{name}: concurrency_key", self.signature)
        else:
            payload.check_concurrency(None, concurrency_limit)
        payload.check_fair(fair_key, fair_weight)
        self.fair_key, self.fair_weight = fair_key, fair_weight
        if fair_key is not None:
            arguments.template_fields(fair_key, f"{name}: fair_key", self.signature)
        self.rate_limit = (
            None if rate_limit is None else rates.parse_rate(rate_limit, f"{name}: rate_limit")
        )
        """At most this many attempt starts per period (`heartq.rates`), per `rate_key`."""
        self.rate_key = rate_key
        if rate_key is not None:
            if rate_limit is None:
                raise ConfigError(f"{name}: rate_key needs a rate_limit, like rate_limit='10/s'")
            payload.check_key("rate_key", rate_key)
            arguments.template_fields(rate_key, f"{name}: rate_key", self.signature)
        self.retry_rule = RetryOn.of(options.get("retry_on"), options.get("dont_retry_on"))
        """Which exceptions of its code are worth another attempt (judged by the worker)."""
        self.backoff = _backoff(name, options)
        """The shape of its waits between attempts (exponential, linear, constant, or its
        explicit intervals; jitter)."""
        delay = options.get("retry_delay")
        self.retry_delay = None if delay is None else check_retry_delay(delay)
        """Its function of (attempt, exc) giving the wait before a retry, or None: asked by
        the worker running an attempt whose code raised (`heartq.worker.invoke`)."""
        self.unique = options.get("unique", False)
        """Its jobs are keyed by their task and arguments, within `unique_for` seconds."""
        self.unique_for = options.get("unique_for")
        if not isinstance(self.unique, bool):
            raise ConfigError(f"{name}: unique must be True or False, got {self.unique!r}")
        payload.check_duration(f"{name}: unique_for", self.unique_for, allow_zero=True)
        if self.unique_for is not None and not self.unique:
            raise ConfigError(f"{name}: unique_for needs unique=True: the window of which key?")
        self.expires = options.get("expires")
        """Seconds after its first due time by which each of its jobs must have started
        (None: no expiry), unless its enqueue gives its own `expires`."""
        payload.check_duration(f"{name}: expires", self.expires)
        self.is_async = inspect.iscoroutinefunction(fn)
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
            retry_intervals=self.backoff.intervals,
            retry_delay=self.retry_delay is not None,
            unique=self.unique,
            unique_for=self.unique_for,
            expires=self.expires,
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
        arguments: its template filled from them (and the function's defaults); none for
        a job whose template reads an argument that is None or absent (`fill_template`)."""
        if self.concurrency_key is None:
            return None, None
        key = arguments.fill_template(
            self.name, "concurrency_key", self.concurrency_key, args, self.defaults
        )
        return (None, None) if key is None else (key, self.concurrency_limit)

    def fair_key_for(self, args: Mapping[str, Any]) -> str | None:
        """The fairness key this task declares for a job with these arguments, as
        `concurrency_for` fills its key (None: the job joins the share without a key)."""
        if self.fair_key is None:
            return None
        return arguments.fill_template(self.name, "fair_key", self.fair_key, args, self.defaults)

    def bind(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The job arguments for this call; `TypeError` naming a wrong or missing one."""
        return arguments.bind(self.name, self.signature, args, kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the function in the caller, as plain Python (handy in tests)."""
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.queue}>"


REPLACED_BY_INTERVALS = ("retry_backoff", "retry_backoff_max", "retry_schedule")
"""The options `retry_intervals` replaces: giving both is a mistake, said at definition."""


def _backoff(name: str, options: TaskOptions) -> Backoff:
    """A task's shape of waits from its options: its `retry_intervals` (exact, unless it
    asks for `retry_jitter=True`), else its `retry_schedule` (jitter by default)."""
    given = options.get("retry_intervals")
    if given is None:
        schedule = options.get("retry_schedule", EXPONENTIAL)
        return Backoff(schedule, options.get("retry_jitter", True))
    clash = [option for option in REPLACED_BY_INTERVALS if option in options]
    if clash:
        raise ConfigError(f"{name}: retry_intervals replaces {clash[0]}: give one or the other")
    return Backoff(jitter=options.get("retry_jitter", False), intervals=retry_intervals(given))
