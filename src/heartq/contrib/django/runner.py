"""What heartq runs for a Django task: a function registered with heartq under the task's
path, which calls the task's own function as Django's contract says.

Its signature is the task's, without Django's `context` and with heartq's `ctx` first:
heartq checks each enqueue's arguments against it (`BadArguments`, nothing stored), fills
key templates from them, and hands it the attempt's `JobContext`. A task that takes
Django's context gets a `HeartqTaskContext`: Django's `TaskContext` (its `task_result`
read from the job as it stands, so `context.attempt` is heartq's attempt number and its
`errors` are the earlier attempts'), plus `heartq`, the `JobContext` (to beat for a
`heartbeat_timeout`, save a checkpoint, report progress).

Around each attempt, as Django does around a request: `close_old_connections()` before
and after a sync task (a worker's threads live for days; a connection past
`CONN_MAX_AGE` or broken by a database restart is replaced; an async task's ORM calls
run in `sync_to_async`'s threads, not the event loop's), and the framework's
`task_started` and `task_finished` signals, the latter with the attempt's outcome (a
FAILED attempt may still be retried: the stored job then reads READY). A task that
raises or returns `heartq.Snooze` within its `max_snoozes` has not failed and has not
finished: its attempt's `task_finished` says READY, as the job then reads, with no
error added (a receiver counting attempts in flight still sees each one end); a snooze
past the bound is a failed attempt and reads FAILED.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import traceback
from collections.abc import Callable
from typing import Any

from django.db import close_old_connections
from django.utils import timezone

from heartq.context import JobContext
from heartq.contrib.django.compat import (
    TaskContext,
    TaskError,
    TaskResultStatus,
    task_finished,
    task_started,
)
from heartq.contrib.django.task import HeartqTask
from heartq.errors import Snooze


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class HeartqTaskContext(TaskContext):  # type: ignore[misc]  # Django's TaskContext is untyped
    """Django's `TaskContext` with heartq's `JobContext` of the attempt:
    `context.heartq.heartbeat(progress=0.5)`."""

    heartq: JobContext


def runner_for(task: HeartqTask) -> Callable[..., Any]:
    """The function heartq registers for `task` (sync or async, as the task is)."""
    parameters = list(inspect.signature(task.func).parameters.values())
    if task.takes_context:
        parameters = parameters[1:]
    ctx = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    signature = inspect.Signature([ctx, *parameters])

    if inspect.iscoroutinefunction(task.func):

        async def run_async(ctx: JobContext, **kwargs: Any) -> Any:
            result = await asyncio.to_thread(_started, task, ctx)
            call = task.func(*_context(task, result, ctx), **kwargs)
            return await _finishing_async(task, result, ctx, call)

        runner: Callable[..., Any] = run_async
    else:

        def run(ctx: JobContext, **kwargs: Any) -> Any:
            close_old_connections()
            try:
                result = _started(task, ctx)
                try:
                    value = task.func(*_context(task, result, ctx), **kwargs)
                except BaseException as exc:
                    _ended_by(task, result, ctx, exc)
                    raise
                _ended_by(task, result, ctx, value)
                return value
            finally:
                close_old_connections()

        runner = run
    runner.__signature__ = signature  # type: ignore[attr-defined]
    runner.__name__ = task.func.__name__
    runner.__qualname__ = task.func.__qualname__
    runner.__module__ = task.func.__module__
    runner.__doc__ = task.func.__doc__
    return runner


def _context(task: HeartqTask, result: Any, ctx: JobContext) -> tuple[Any, ...]:
    return (HeartqTaskContext(task_result=result, heartq=ctx),) if task.takes_context else ()


def _started(task: HeartqTask, ctx: JobContext) -> Any:
    """The attempt's `TaskResult` as stored (RUNNING), after `task_started` was sent."""
    backend = task.get_backend()
    result = backend.get_result(ctx.job_id)
    task_started.send(sender=type(backend), task_result=result)
    return result


async def _finishing_async(task: HeartqTask, result: Any, ctx: JobContext, call: Any) -> Any:
    try:
        value = await call
    except BaseException as exc:
        await asyncio.to_thread(_ended_by, task, result, ctx, exc)
        raise
    await asyncio.to_thread(_ended_by, task, result, ctx, value)
    return value


def _ended_by(task: HeartqTask, result: Any, ctx: JobContext, outcome: Any) -> None:
    """`task_finished` for an attempt whose task returned or raised `outcome`."""
    if isinstance(outcome, Snooze):
        _snoozed(task, result, ctx, outcome)
    elif isinstance(outcome, BaseException):
        _failed(task, result, outcome)
    else:
        _succeeded(task, result, outcome)


def _snoozed(task: HeartqTask, result: Any, ctx: JobContext, snooze: Snooze) -> None:
    """A snooze within the job's `max_snoozes` leaves the job READY (the worker's own
    reading of the bound, `ctx.snoozes` against `ctx.max_snoozes`); past it, a failure."""
    if ctx.snoozes >= ctx.max_snoozes:
        _failed(task, result, snooze)
        return
    object.__setattr__(result, "status", TaskResultStatus.READY)
    task_finished.send(sender=type(task.get_backend()), task_result=result)


def _succeeded(task: HeartqTask, result: Any, value: Any) -> None:
    object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    object.__setattr__(result, "finished_at", timezone.now())
    object.__setattr__(result, "_return_value", value)
    task_finished.send(sender=type(task.get_backend()), task_result=result)


def _failed(task: HeartqTask, result: Any, exc: BaseException) -> None:
    """`task_finished` for an attempt that raised, sent while it is handled (Django's
    logger then logs its traceback), with its error added to the result."""
    kind = type(exc)
    result.errors.append(
        TaskError(
            exception_class_path=f"{kind.__module__}.{kind.__qualname__}",
            traceback="".join(traceback.format_exception(exc)),
        )
    )
    object.__setattr__(result, "status", TaskResultStatus.FAILED)
    object.__setattr__(result, "finished_at", timezone.now())
    task_finished.send(sender=type(task.get_backend()), task_result=result)
