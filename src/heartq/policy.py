"""A job's policy: the options its caller chose, and the task's declaration for the rest.

A task's options (queue, priority, retries, backoff, timeouts) belong to the task, not to
whoever enqueues it: a web server enqueueing `"resize"` by name need not know them. Each
worker declares the tasks it runs (`Store.declare_tasks`), an enqueue by name takes the
declaration, and a job records which options its caller chose (`chosen`, bits below).
What it did not choose follows the task: a declaration that changes (or comes after the
enqueue: a fresh deploy, a script run before any worker) re-routes the jobs still
waiting, and the worker that runs a job applies its own task's retry policy.

The one place that decides where each option of a job comes from: `resolve` (enqueue),
`RateChoice` (its rate limit), `for_attempt` (the worker), `sources` (what `heartq jobs
show` says).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from heartq import arguments, rates
from heartq.errors import ConfigError
from heartq.lifecycle.retry import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_MAX_SNOOZES,
    DEFAULT_RETRY_BACKOFF,
    DEFAULT_RETRY_BACKOFF_MAX,
)
from heartq.model import ClaimedJob, TaskPolicy

DEFAULT_QUEUE = "default"
"""Defaults to the queue named `default`."""
DEFAULT_PRIORITY = 0
"""Defaults to priority 0 (higher runs first)."""

QUEUE = 1
"""`chosen` bit: the caller chose the queue."""
PRIORITY = 2
"""`chosen` bit: the caller chose the priority."""
MAX_RETRIES = 4
"""`chosen` bit: the caller chose max_retries."""
RETRY_BACKOFF = 8
"""`chosen` bit: the caller chose the retry backoff (its base and its cap)."""
ALL_CHOSEN = QUEUE | PRIORITY | MAX_RETRIES | RETRY_BACKOFF
"""A job whose every option was given (what a `NewJob` built by hand means)."""
CHOSEN_BITS = {
    "queue": QUEUE,
    "priority": PRIORITY,
    "max_retries": MAX_RETRIES,
    "retry_backoff": RETRY_BACKOFF,
    "retry_backoff_max": RETRY_BACKOFF,
}
BIT_PARAMS = {
    "queue_bit": QUEUE,
    "priority_bit": PRIORITY,
    "retries_bit": MAX_RETRIES,
    "backoff_bit": RETRY_BACKOFF,
}
"""The bits as the re-route statement (`REROUTE_JOBS`) takes them."""
DECLARED_FIELDS = (
    "queue",
    "priority",
    "max_retries",
    "retry_backoff",
    "retry_backoff_max",
    "timeout",
    "heartbeat_timeout",
    "parameters",
    "rate_limit",
    "rate_key",
    "retry_schedule",
    "retry_jitter",
    "retry_on",
    "dont_retry_on",
    "retry_intervals",
    "retry_delay",
    "unique",
    "unique_for",
    "expires",
)
"""What a declaration says: two declarations that agree on these are the same."""

CALLER = "caller"
TASK = "task"
DEFAULTS = "defaults (task not declared yet)"


def defaults(name: str) -> TaskPolicy:
    """The policy of a task no worker has declared yet."""
    return TaskPolicy(
        name=name,
        queue=DEFAULT_QUEUE,
        priority=DEFAULT_PRIORITY,
        max_retries=DEFAULT_MAX_RETRIES,
        retry_backoff=DEFAULT_RETRY_BACKOFF,
        retry_backoff_max=DEFAULT_RETRY_BACKOFF_MAX,
    )


def same(old: TaskPolicy | None, new: TaskPolicy) -> bool:
    """Whether a declaration changes nothing (its time and worker aside)."""
    return old is not None and all(
        getattr(old, name) == getattr(new, name) for name in DECLARED_FIELDS
    )


def chosen_bits(queue: str | None, priority: int | None, max_retries: int | None) -> int:
    """The `chosen` bits of an enqueue: each option given (not None) is the caller's."""
    given = {QUEUE: queue, PRIORITY: priority, MAX_RETRIES: max_retries}
    return sum(bit for bit, value in given.items() if value is not None)


def resolve(
    policy: TaskPolicy, queue: str | None, priority: int | None, max_retries: int | None
) -> dict[str, Any]:
    """The options a new job is stored with: the caller's, else the task's policy."""
    return {
        "queue": queue if queue is not None else policy.queue,
        "priority": priority if priority is not None else policy.priority,
        "max_retries": max_retries if max_retries is not None else policy.max_retries,
        "retry_backoff": policy.retry_backoff,
        "retry_backoff_max": policy.retry_backoff_max,
        "chosen": chosen_bits(queue, priority, max_retries),
    }


@dataclasses.dataclass(frozen=True)
class RateChoice:
    """The rate limit of an enqueue's jobs, decided once per enqueue: the caller's
    `rate_key` (with its `rate_limit`, else the task's), or the task's own limit under
    its `rate_key` template filled from each job's arguments (the task's name without
    one), or none. `for_job` gives one job's stored fields."""

    task: str
    limit: rates.RateLimit | None = None
    key: str | None = None  # the caller's, for every job
    template: str | None = None  # the task's, filled per job (None: the task's name)
    defaults: Mapping[str, Any] | None = None  # for the template (`arguments.fill_template`)

    @classmethod
    def of(
        cls,
        task: str,
        policy: TaskPolicy,
        chosen: Mapping[str, Any],
        defaults: Mapping[str, Any] | None = None,
    ) -> RateChoice:
        """From what the caller chose (`rate_key`, `rate_limit`: both, or the key alone
        with the task's limit) and the task's policy (registered here or declared), with
        the `defaults` its template reads (the function's, or `declared_defaults`);
        `ConfigError` for a key without any limit to apply."""
        key, spec = chosen.get("rate_key"), chosen.get("rate_limit")
        if key is not None:
            if spec is None and policy.rate_limit is None:
                raise ConfigError(
                    f"rate_key {key!r} needs a rate_limit: task {task!r} declares none, so "
                    f"give rate_limit too, like rate_limit='10/s'"
                )
            limit = rates.parse_rate(spec if spec is not None else policy.rate_limit)
            return cls(task, limit, key)
        if policy.rate_limit is None:
            return cls(task)
        limit = rates.parse_rate(policy.rate_limit, f"task {task!r}'s declared rate_limit")
        return cls(task, limit, template=policy.rate_key, defaults=defaults)

    def for_job(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """`rate_key`, `rate_limit`, `rate_period` of one job (all None: not limited, as
        a job is whose template reads an argument that is None or absent); `TypeError`
        when the template reads one whose value is not known here (`fill_template`)."""
        key = self.key
        if key is None and self.limit is not None:
            template = self.template
            key = (
                self.task
                if template is None
                else arguments.fill_template(self.task, "rate_key", template, args, self.defaults)
            )
        if key is None or self.limit is None:
            return {"rate_key": None, "rate_limit": None, "rate_period": None}
        return {"rate_key": key, "rate_limit": self.limit.count, "rate_period": self.limit.period}


def for_attempt(
    job: ClaimedJob, policy: TaskPolicy | None, max_snoozes: int = DEFAULT_MAX_SNOOZES
) -> ClaimedJob:
    """The claimed job with the running worker's own task policy for every retry option
    its caller did not choose, and its task's shape of waits and bound on snoozes (a
    caller does not choose those) (None: the worker does not know the task; the job keeps
    what it was stored with). `max_snoozes`: the task's, as this worker defines it (not
    declared)."""
    if policy is None:
        return job
    backoff_chosen = bool(job.chosen & RETRY_BACKOFF)
    max_retries = job.max_retries if job.chosen & MAX_RETRIES else policy.max_retries
    retry_backoff = job.retry_backoff if backoff_chosen else policy.retry_backoff
    retry_backoff_max = job.retry_backoff_max if backoff_chosen else policy.retry_backoff_max
    schedule, jitter, intervals = policy.retry_schedule, policy.retry_jitter, policy.retry_intervals
    chosen = (max_retries, retry_backoff, retry_backoff_max, schedule, jitter, intervals)
    if (*chosen, max_snoozes) == (
        job.max_retries, job.retry_backoff, job.retry_backoff_max, job.retry_schedule,
        job.retry_jitter, job.retry_intervals, job.max_snoozes,
    ):  # fmt: skip
        return job  # the usual case, stored as declared: no copy (8 us a job)
    return dataclasses.replace(
        job,
        max_retries=max_retries,
        retry_backoff=retry_backoff,
        retry_backoff_max=retry_backoff_max,
        retry_schedule=schedule,
        retry_jitter=jitter,
        max_snoozes=max_snoozes,
        retry_intervals=intervals,
    )


def sources(job: Mapping[str, Any], chosen: int, declared: TaskPolicy | None) -> dict[str, Any]:
    """The policy in force for a job, each part with where it comes from (the caller,
    the task's declaration, or the defaults while the task is not declared). The shape
    of its waits (`retry_schedule`, `retry_jitter`, `retry_intervals`, and whether a
    `retry_delay` function decides first) is always its task's."""
    task_or_default = TASK if declared is not None else DEFAULTS
    shape = declared if declared is not None else defaults(str(job.get("task", "")))
    intervals = shape.retry_intervals

    def part(name: str, value: Any) -> dict[str, Any]:
        bit = CHOSEN_BITS.get(name, 0)
        return {"value": value, "from": CALLER if chosen & bit else task_or_default}

    return {
        "queue": part("queue", job["queue"]),
        "priority": part("priority", job["priority"]),
        "max_retries": part("max_retries", job["max_retries"]),
        "retry_backoff": part("retry_backoff", job["retry_backoff"]),
        "retry_backoff_max": part("retry_backoff_max", job["retry_backoff_max"]),
        "timeout": part("timeout", declared.timeout if declared else None),
        "heartbeat_timeout": part(
            "heartbeat_timeout", declared.heartbeat_timeout if declared else None
        ),
        "retry_schedule": part("retry_schedule", shape.retry_schedule),
        "retry_jitter": part("retry_jitter", shape.retry_jitter),
        "retry_intervals": part("retry_intervals", intervals and list(intervals)),
        "retry_delay": part("retry_delay", shape.retry_delay),
        "declared": declared is not None,
    }
