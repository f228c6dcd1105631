"""Calling a task function and turning what happened into an `AttemptEnd`.

Shared by every pool (thread, async, and the child process of the process pool) so a
task behaves the same wherever it runs.
"""

from __future__ import annotations

import asyncio
import traceback
from typing import TYPE_CHECKING, Any

from heartq import payload
from heartq.errors import Cancelled, LeaseLost, PayloadError, Permanent
from heartq.lifecycle.ends import AttemptEnd
from heartq.model import Outcome

if TYPE_CHECKING:
    from heartq.app import Task
    from heartq.context import AttemptControl, JobContext


def task_kwargs(task: Task[Any, Any], ctx: JobContext, args: dict[str, Any]) -> dict[str, Any]:
    kwargs = dict(args)
    if task.wants_ctx:
        kwargs["ctx"] = ctx
    return kwargs


def end_from_result(value: Any, limit: int) -> AttemptEnd:
    try:
        return AttemptEnd(
            Outcome.SUCCEEDED, result_json=payload.encode(value, what="result", limit=limit)
        )
    except PayloadError as exc:
        # Retrying cannot make the same code return something storable.
        return AttemptEnd(Outcome.FAILED, error=f"PayloadError: {exc}", permanent=True)


def end_from_exception(exc: BaseException, cancel_requested: bool) -> AttemptEnd:
    text = "".join(traceback.format_exception(exc)).rstrip()
    if isinstance(exc, LeaseLost):
        return AttemptEnd(Outcome.LOST, error=text)
    if isinstance(exc, Cancelled | asyncio.CancelledError) and cancel_requested:
        return AttemptEnd(Outcome.CANCELLED, error=text)
    return AttemptEnd(Outcome.FAILED, error=text, permanent=isinstance(exc, Permanent))


def run_sync(
    task: Task[Any, Any], ctx: JobContext, control: AttemptControl, args: dict[str, Any], limit: int
) -> AttemptEnd:
    """Run a task to its end in this thread (an `async def` task gets its own loop).
    `control` is the attempt's (its ctx's) control: whether a cancel was requested."""
    try:
        kwargs = task_kwargs(task, ctx, args)
        value = asyncio.run(task.fn(**kwargs)) if task.is_async else task.fn(**kwargs)
    except BaseException as exc:  # everything a task raises is its outcome
        if isinstance(exc, KeyboardInterrupt):
            raise
        return end_from_exception(exc, control.cancel_requested)
    return end_from_result(value, limit)


async def run_async(
    task: Task[Any, Any], ctx: JobContext, control: AttemptControl, args: dict[str, Any], limit: int
) -> AttemptEnd:
    """Run a task in the current event loop (a sync task goes to a thread)."""
    try:
        kwargs = task_kwargs(task, ctx, args)
        if task.is_async:
            value = await task.fn(**kwargs)
        else:
            value = await asyncio.to_thread(task.fn, **kwargs)
    except BaseException as exc:
        if isinstance(exc, asyncio.CancelledError) and not control.cancel_requested:
            raise
        if isinstance(exc, KeyboardInterrupt):
            raise
        return end_from_exception(exc, control.cancel_requested)
    return end_from_result(value, limit)
