"""`HeartqTask`: the backend's task class, Django's `Task` with heartq's task options.

Django 6.1 and the backport hand every keyword of `@task(...)` they do not know to the
backend's `task_class`; here they are heartq's options of the task's definition
(`heartq.contrib.django.options.DEFINITION`), checked when the task is defined: a word
the backend cannot carry is one line of `InvalidTask` there, not a `TypeError` of the
dataclass's constructor. `task.using(...)` also takes heartq's options of one enqueue
(`depends_on`, `unique_key`, `meta`, ...), kept in `enqueue_options`.

Django's `Task` is a frozen dataclass with slots; this is one too (so `using()`, which
copies the task with `dataclasses.replace`, keeps the options). A slotted dataclass is a
new class, so its methods name their base explicitly (`Task.using(self, ...)`): a bare
`super()` would look for the class that was replaced.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.utils import timezone

from heartq.contrib.django.compat import InvalidTask, Task
from heartq.contrib.django.options import refuse_definition_words, refuse_enqueue_words
from heartq.errors import ConfigError
from heartq.options import OPTIONS


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class HeartqTask(Task):  # type: ignore[misc]  # Django's Task is untyped
    """A Django task run by heartq. None for an option means the backend's `OPTIONS`
    (`TASKS`, then `TASK_OPTIONS`) decide, then heartq's defaults."""

    max_retries: int | None = None
    retry_backoff: float | None = None
    retry_backoff_max: float | None = None
    retry_schedule: str | None = None
    retry_jitter: bool | None = None
    retry_intervals: Any = dataclasses.field(default=None, hash=False)
    """A list of waits (not hashed: a list is not hashable)."""
    retry_delay: Any = None
    retry_on: Any = None
    dont_retry_on: Any = None
    timeout: float | None = None
    heartbeat_timeout: float | None = None
    max_snoozes: int | None = None
    expires: float | None = None
    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    rate_limit: str | None = None
    rate_key: str | None = None
    unique: bool | None = None
    unique_key: str | None = None
    unique_for: float | None = None
    on_conflict: str | None = None
    enqueue_options: Mapping[str, Any] = dataclasses.field(default_factory=dict, hash=False)
    """heartq's options of one enqueue, chosen with `using()` (never changed: `using()`
    makes a new task; not hashed: its values may be lists)."""

    def using(
        self,
        *,
        priority: int | None = None,
        queue_name: str | None = None,
        run_after: datetime | None = None,
        backend: str | None = None,
        **options: Any,
    ) -> HeartqTask:
        """Django's `using()`, which also takes heartq's options of one enqueue
        (`heartq.contrib.django.options.ENQUEUE`): `task.using(depends_on=[result.id])`,
        each checked here (`InvalidTask`, one line); their combination is checked with the
        task's own at the enqueue (`ConfigError`). A naive `expires` time is in the
        current time zone, as Django takes a naive `run_after` without `USE_TZ`."""
        refuse_enqueue_words(options)
        expires = options.get("expires")
        if isinstance(expires, datetime) and timezone.is_naive(expires):
            options["expires"] = timezone.make_aware(expires)
        for option in OPTIONS:
            if option.name in options:
                try:
                    option.check(option, options[option.name])
                except ConfigError as exc:
                    raise InvalidTask(f"task.using(): {exc}") from None
        task: HeartqTask = Task.using(
            self, priority=priority, queue_name=queue_name, run_after=run_after, backend=backend
        )
        if not options:
            return task
        return dataclasses.replace(task, enqueue_options={**self.enqueue_options, **options})

    @property
    def definition_options(self) -> dict[str, Any]:
        """The heartq options written in `@task(...)` (those given)."""
        return {
            name: getattr(self, name)
            for name in _OPTION_FIELDS
            if getattr(self, name) is not None
        }


_OPTION_FIELDS = tuple(
    f.name for f in dataclasses.fields(HeartqTask) if f.name not in {"enqueue_options"}
    and f.name not in {g.name for g in dataclasses.fields(Task)}
)
_KNOWN = frozenset(f.name for f in dataclasses.fields(HeartqTask))
_generated_init = HeartqTask.__init__


def _checked_init(self: HeartqTask, **fields: Any) -> None:
    """The dataclass's constructor, after a word it has no field for was refused in one
    line (Django 6.1's `@task(...)` passes every keyword it does not know here)."""
    refuse_definition_words([name for name in fields if name not in _KNOWN], "@task()")
    _generated_init(self, **fields)


HeartqTask.__init__ = _checked_init  # type: ignore[method-assign,assignment]
