"""heartq's options, as a Django task carries them: which go with the task's definition
(`@task(max_retries=5, timeout=60)` on Django 6.1 and the backport, or the backend's
`OPTIONS`), which with one enqueue (`task.using(depends_on=[...])`), and why any other
word is refused, in one line (`InvalidTask`), where it is written.

Django's own words are never doubled: a task's queue is Django's `queue_name`, its
priority Django's `priority`, its start Django's `run_after`, its name its function's
path; heartq's words for them are refused with the Django word to use instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from heartq.contrib.django.compat import InvalidTask

DEFINITION = (
    "max_retries",
    "retry_backoff",
    "retry_backoff_max",
    "retry_schedule",
    "retry_jitter",
    "retry_intervals",
    "retry_delay",
    "retry_on",
    "dont_retry_on",
    "timeout",
    "heartbeat_timeout",
    "max_snoozes",
    "expires",
    "concurrency_key",
    "concurrency_limit",
    "rate_limit",
    "rate_key",
    "unique",
    "unique_key",
    "unique_for",
    "on_conflict",
)
"""What `@task(...)` and the backend's `OPTIONS` take of heartq's task options (each as
`@app.task` takes it: docs/INTERFACE.md). `concurrency_key`, `rate_key` and `unique_key`
are templates of the job's arguments (`"report:{report_id}"`), filled at each enqueue."""

REGISTERED = tuple(
    name for name in DEFINITION if name not in ("unique_key", "unique_for", "on_conflict")
)
"""The definition options heartq's task itself takes (`@app.task`); the others
(`unique_key`, `unique_for`, `on_conflict`) go with each enqueue, but for `unique_for`
of a task declared `unique=True`, which is the declaration's."""

REPLACING = {
    "retry_intervals": ("retry_backoff", "retry_backoff_max", "retry_schedule"),
    "retry_backoff": ("retry_intervals",),
    "retry_backoff_max": ("retry_intervals",),
    "retry_schedule": ("retry_intervals",),
    "unique": ("unique_key",),
    "unique_key": ("unique",),
}
"""Words that say the same thing another way: one given in a later layer of a task's
options (`@task()` after `OPTIONS['TASKS']` after `OPTIONS['TASK_OPTIONS']`) replaces the
others given in an earlier one (a task's `retry_intervals` over the backend's
`retry_backoff`), where heartq would refuse both (two in one layer are still refused)."""

ENQUEUE = (
    "max_retries",
    "expires",
    "unique",
    "unique_key",
    "unique_for",
    "on_conflict",
    "concurrency_key",
    "concurrency_limit",
    "rate_key",
    "rate_limit",
    "meta",
    "depends_on",
    "on_dependency_failure",
)
"""What `task.using(...)` takes besides Django's own words: heartq's enqueue options
(docs/INTERFACE.md), for the jobs that task enqueues. Keys here are literal keys."""

DJANGO_WORDS = {
    "queue": "a task's queue is Django's queue_name (@task(queue_name=...) or "
    "task.using(queue_name=...))",
    "delay": "a task's first start is Django's run_after: task.using(run_after=...)",
    "eta": "a task's first start is Django's run_after: task.using(run_after=...)",
    "name": "a heartq task is named after its function's path (module.function)",
    "connection": "an enqueue joins the transaction open on Django's connection by itself "
    "(docs/INTEGRATIONS.md#django)",
}
"""heartq's words Django has its own for, and what to write instead."""


def refuse_definition_words(names: Iterable[str], where: str) -> None:
    """`InvalidTask` for the first word of `names` a task's definition cannot carry;
    `where` says where it was written (`@task()`, `OPTIONS['TASK_OPTIONS']`)."""
    _refuse(
        names, where, DEFINITION, ENQUEUE,
        elsewhere="it belongs to one enqueue: task.using({name}=...)",
        known=f"heartq's task options are {', '.join(DEFINITION)}",
    )  # fmt: skip


def refuse_enqueue_words(names: Iterable[str]) -> None:
    """`InvalidTask` for the first word of `names` one enqueue cannot carry."""
    _refuse(
        names, "task.using()", ENQUEUE, DEFINITION,
        elsewhere="it is part of the task's definition: @task({name}=...)",
        known="task.using() takes Django's priority, queue_name, run_after, backend, "
        f"and heartq's {', '.join(ENQUEUE)}",
    )  # fmt: skip


def _refuse(
    names: Iterable[str],
    where: str,
    carried: Iterable[str],
    other: Iterable[str],
    *,
    elsewhere: str,
    known: str,
) -> None:
    """`InvalidTask` for the first of `names` not in `carried`, saying why: Django's own
    reason for its words, where a word of the `other` place goes (`elsewhere`, its
    `{name}` filled in), else what `where` takes (`known`)."""
    for name in names:
        if name in carried:
            continue
        if name in DJANGO_WORDS:
            why = DJANGO_WORDS[name]
        elif name in other:
            why = elsewhere.format(name=name)
        else:
            why = known
        raise InvalidTask(f"{where} got {name!r}, which the heartq backend cannot carry: {why}")


def merged(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """The options of a task's definition, later layers winning, a word of a later layer
    replacing its other spellings in earlier ones (`REPLACING`); None means not given."""
    out: dict[str, Any] = {}
    for layer in layers:
        given = {name: value for name, value in layer.items() if value is not None}
        for name in given:
            for replaced in REPLACING.get(name, ()):
                out.pop(replaced, None)
        out.update(given)
    return out
