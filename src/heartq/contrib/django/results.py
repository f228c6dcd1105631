"""A heartq job as Django's `TaskResult`: its status in Django's four words, its attempts,
their workers and errors, its timestamps and return value, read from the stored job and
its executions (`App.get_job`, the shape of `heartq jobs show --json`).

Statuses (docs/INTEGRATIONS.md#django says the same): `queued` and `waiting` are READY
(a job waiting out a retry's backoff is "ready to be executed again", Django's words),
and so is a job claimed ahead by a worker (`--prefetch`) whose code has not started;
`running` is RUNNING; `succeeded` is SUCCESSFUL; `dead` is FAILED, and so are
`cancelled` and `blocked` (a dependency died), which Django's FAILED covers as "unable to
start". A dead or blocked job can still be replayed (`heartq dlq replay`): it is then
READY again.

Attempts are those heartq counts: an execution `released` (given back at a graceful
shutdown, or claimed ahead and never started) or `interrupted` (its worker lost the
database) is not one, and is in neither `worker_ids` nor `errors`. Each attempt that did
not succeed is one `TaskError`: the exception's class path and its traceback as stored
for a task that raised; `builtins.TimeoutError` for a timeout heartq enforced;
`heartq.contrib.django.errors.AttemptCrashed` for a crash (the worker or its child
died, or its lease ran out) with heartq's account of it; `heartq.errors.Cancelled` for
an attempt stopped by a cancel. A job cancelled or blocked before any attempt gets one
error saying so (`heartq.errors.JobCancelled`, `heartq.errors.JobDead` naming the dead
job that blocks it).
"""

from __future__ import annotations

import builtins
import re
from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils import timezone
from django.utils.module_loading import import_string

from heartq import errors as heartq_errors
from heartq.contrib.django.compat import (
    InvalidTask,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
)
from heartq.contrib.django.errors import AttemptCrashed
from heartq.contrib.django.task import HeartqTask
from heartq.lifecycle.fate import NOT_COUNTED

POSITIONAL_META = "django.args"
"""The job's meta key naming the arguments Django's caller passed by position (a job
stores its arguments by name), so a result gives them back as `args`."""
NOT_ATTEMPTS = frozenset(outcome.value for outcome in NOT_COUNTED)
"""Executions heartq does not count as attempts (`heartq.lifecycle.fate.NOT_COUNTED`)."""
TRACEBACK_HEAD = "Traceback (most recent call last):"
_CLASS_PATH = re.compile(r"[A-Za-z_][\w.]*")
_GROUP_LINE = re.compile(r"^\s*\| (?P<head>[A-Za-z_][\w.]*)(?::|$)")


def status_of(job: dict[str, Any]) -> Any:
    """Django's word for the job's status (the module's docstring says which and why)."""
    status = job["status"]
    if status == "succeeded":
        return TaskResultStatus.SUCCESSFUL
    if status in ("dead", "cancelled", "blocked"):
        return TaskResultStatus.FAILED
    if status == "running" and not job.get("claimed_ahead"):
        return TaskResultStatus.RUNNING
    return TaskResultStatus.READY


def exception_class_path(error: str) -> str:
    """The class path of the exception whose traceback `error` is (heartq stores the
    standard formatting: the last `Traceback` block is the exception raised, its first
    line not indented is `module.Class: message`, builtins and `__main__` without their
    module); a text heartq wrote itself names one of `heartq.errors` (`PayloadError:
    ...`). `builtins.Exception` when no class can be read."""
    lines = error.rstrip().splitlines()
    heads = [n for n, line in enumerate(lines) if line == TRACEBACK_HEAD]
    if not heads and any("Exception Group Traceback" in line for line in lines[:3]):
        for line in lines:
            group = _GROUP_LINE.match(line)
            if group:
                return _qualified(group["head"])
    start = heads[-1] + 1 if heads else 0
    for line in lines[start:]:
        if line and not line[0].isspace():
            head = line.split(":", 1)[0].strip()
            return _qualified(head) if _CLASS_PATH.fullmatch(head) else "builtins.Exception"
    return "builtins.Exception"


def _qualified(head: str) -> str:
    if "." in head:
        return head
    if isinstance(getattr(builtins, head, None), type):
        return f"builtins.{head}"
    if isinstance(getattr(heartq_errors, head, None), type):
        return f"heartq.errors.{head}"
    return f"__main__.{head}"


def attempt_error(execution: dict[str, Any]) -> Any:
    """The `TaskError` of an attempt that did not succeed."""
    text = execution.get("error") or execution["outcome"]
    outcome = execution["outcome"]
    if outcome == "timed_out":
        path = "builtins.TimeoutError"
    elif outcome == "crashed":
        path = f"{AttemptCrashed.__module__}.{AttemptCrashed.__qualname__}"
    elif outcome == "cancelled":
        path = "heartq.errors.Cancelled"
    else:
        path = exception_class_path(text)
    return TaskError(exception_class_path=path, traceback=text)


def job_error(job: dict[str, Any]) -> Any | None:
    """The error of a job that ended without an attempt of its own to blame: cancelled
    before it ran, or blocked by a dead dependency."""
    if job["status"] == "blocked":
        root = job.get("blocked_by") or {}
        text = f"blocked by dead job {root.get('id')} ({root.get('task')}): {root.get('error')}"
        return TaskError(exception_class_path="heartq.errors.JobDead", traceback=text)
    if job["status"] == "cancelled":
        text = job.get("error") or f"cancelled by {job.get('cancelled_by')}"
        return TaskError(exception_class_path="heartq.errors.JobCancelled", traceback=text)
    return None


def moment(text: str | None) -> datetime | None:
    """A stored time (ISO 8601, UTC) as Django wants it: aware, or naive in the current
    time zone when `USE_TZ` is off."""
    if text is None:
        return None
    value = datetime.fromisoformat(text)
    return value if settings.USE_TZ else timezone.make_naive(value)


def django_task(job: dict[str, Any], alias: str) -> Any:
    """The Django task whose job this is (its task is named after the function's path),
    as it was enqueued: its priority and queue. `TaskResultDoesNotExist` for a job of
    another kind of task (a heartq task sharing the queue)."""
    try:
        task = import_string(job["task"])
    except ImportError:
        task = None
    if not isinstance(task, HeartqTask):
        raise TaskResultDoesNotExist(
            f"job {job['id']} is not a Django task's: its task {job['task']!r} names none"
        )
    try:
        return task.using(priority=job["priority"], queue_name=job["queue"], backend=alias)
    except InvalidTask:  # a queue no longer in the backend's QUEUES: the task as defined
        return task


def task_result(job: dict[str, Any], alias: str) -> Any:
    """Django's `TaskResult` of a stored job (`App.get_job`'s shape)."""
    task = django_task(job, alias)
    attempts = [
        e
        for e in job["executions"]
        if e["outcome"] not in NOT_ATTEMPTS
        and not (e["outcome"] is None and job.get("claimed_ahead"))
    ]
    errors = [attempt_error(e) for e in attempts if e["outcome"] not in (None, "succeeded")]
    if not attempts and (ended := job_error(job)) is not None:
        errors.append(ended)
    kwargs = dict(job["args"])
    positional = (job.get("meta") or {}).get(POSITIONAL_META) or []
    args = [kwargs.pop(name) for name in positional if name in kwargs]
    status = status_of(job)
    finished = status in (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED)
    result = TaskResult(
        task=task,
        id=job["id"],
        status=status,
        enqueued_at=moment(job["created_at"]),
        started_at=moment(attempts[0]["started_at"]) if attempts else None,
        last_attempted_at=moment(attempts[-1]["started_at"]) if attempts else None,
        finished_at=moment(job["finished_at"]) if finished else None,
        args=args,
        kwargs=kwargs,
        backend=alias,
        errors=errors,
        worker_ids=[e["worker_id"] for e in attempts],
    )
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", job["result"])
    return result
