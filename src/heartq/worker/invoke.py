"""Calling a task function: with what arguments, and what happened as an `AttemptEnd`.

Shared by every pool (thread, async, and the child process of the process pool) so a
task behaves the same wherever it runs.

A job flagged `dependency_results` takes results of the jobs it waited for as its first
parameter: a group's callback (`heartq.group`) a list of them, in their order; a
pipeline's step that takes the previous step's result (`Signature.takes_result`) that
result as it is (or the list of a group's results). Its worker reads them once, just
before it calls the task (`call_args`: one read, only for such jobs; every other job is
called with its arguments as they are); each is the result its job's landed attempt
saved (the fenced finish), never one of an attempt superseded. One wait: a dependency
its task completed inside `ctx.transaction()` without handing it its result
(`ctx.commit_result`) is succeeded at that commit (which released this job), and its
result is saved a moment after (`result_pending`). The read then says the result is
still to come, and is made again (20 ms, doubling to 0.5 s) until it came, or a lease reclaimer
gave it up once the lease of the attempt that committed it ran out (its worker died
between the two): the result is lost, and the callback gets a `heartq.LostResult` in its
place, never a bare None (`App.result` raises `ResultLost`); a save after that is
refused, so "lost" stays true. Where it runs: in the attempt's own thread (a thread-pool attempt),
off the event loop (async), or in a thread that then starts the child (process pool),
never in the fetch loop.

A `TypeError` is told apart by where it came from, not by its text: the job's arguments
are bound against the task's signature (`heartq.arguments.refusal`, the check an enqueue
makes) only once the call raised one, so the hot path pays nothing. If they do not bind,
the call failed before any of the task's code ran (`CannotRun.ARGUMENTS`: dead at once);
if they do, the code raised it, and it is retried like any exception.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
import traceback
from collections.abc import Callable
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

from heartq import arguments, payload
from heartq.errors import (
    BadArguments,
    Cancelled,
    LeaseLost,
    PayloadError,
    Permanent,
    Snooze,
    StoreUnavailable,
)
from heartq.hooks import AttemptInfo, HookList
from heartq.lifecycle.fate import AttemptEnd, bad_arguments_end, judged, outcome_of, will_retry
from heartq.lifecycle.retry import RetryDelay, asked_delay
from heartq.lost_results import LostResult
from heartq.model import DependencyEnd, JobStatus, Outcome

if TYPE_CHECKING:
    from heartq.app import Task
    from heartq.context import AttemptControl, JobContext
    from heartq.worker.attempt import RunningJob

RESULTS_FIRST_WAIT = 0.02
"""Seconds before the first re-read of a dependency's result still to come; doubled at
each one."""
RESULTS_LONGEST_WAIT = 0.5
"""At most this long between re-reads."""


def needs_context(task: Task[Any, Any]) -> bool:
    """Whether an attempt of `task` needs its `JobContext`: the task takes `ctx`, or its
    app has attempt hooks (their `AttemptInfo` is read from it). Otherwise none is made:
    a context and its copy of the job's meta were a tenth of a no-op job's time on its
    pool thread."""
    return task.wants_ctx or bool(task.app.hooks.attempt)


def task_kwargs(
    task: Task[Any, Any], ctx: JobContext | None, args: dict[str, Any]
) -> dict[str, Any]:
    """What the task is called with (`fn(**kwargs)`, which copies it: `args` is never
    changed by the call)."""
    if not task.wants_ctx:
        return args
    return {**args, "ctx": ctx}


def call_args(run: RunningJob) -> dict[str, Any] | AttemptEnd:
    """The arguments `run`'s task is called with, or, if they cannot be had, the
    attempt's end: a task without a parameter to take the results in can never run
    (`bad_arguments_end`), a read that failed is a failed attempt (retried)."""
    job, task = run.job, run.task
    if not job.dependency_results or task is None:
        return job.args
    try:
        name = arguments.results_parameter(task.name, task.signature)
    except BadArguments as exc:
        return bad_arguments_end(exc)
    try:
        return {**job.args, name: _dependency_results(run)}
    except Exception as exc:  # noqa: BLE001 - the database's error is the attempt's
        return end_from_exception(exc, cancel_requested=False)


def _dependency_results(run: RunningJob) -> Any:
    """The results the job takes (a `LostResult` for one that was lost, None for a
    dependency that did not succeed): the one passed as it is, or the list of them in
    order, once none is still to come, or the attempt was stopped meanwhile."""
    wait = RESULTS_FIRST_WAIT
    while True:
        ends = run.store.dependency_results(run.job.id)
        if not any(end.pending for end in ends) or run.ended is not None or run.lost:
            results = [_taken(end) for end in ends]
            return results[0] if ends and ends[0].as_value else results
        time.sleep(wait)
        wait = min(wait * 2, RESULTS_LONGEST_WAIT)


def _taken(end: DependencyEnd) -> Any:
    """What a job that takes `end`'s result receives for it."""
    if end.lost is not None:
        return LostResult(end.job_id, end.lost)
    return end.result if end.status is JobStatus.SUCCEEDED else None


def describe(exc: BaseException) -> str:
    """An exception's traceback as text, whatever the exception does: the standard
    formatting already stands in for a `__str__` that raises; this also survives a
    traceback that cannot be walked (the last resort names the type alone)."""
    try:
        return "".join(traceback.format_exception(exc)).rstrip()
    except BaseException:  # noqa: BLE001 - a task's exception must never end its runner
        kind = f"{type(exc).__module__}.{type(exc).__qualname__}"
        return f"{kind} (its traceback could not be formatted)"


RETURNED_NONE = AttemptEnd(Outcome.SUCCEEDED, result_json=payload.NULL)
"""The end of every attempt whose code returned None (most tasks): one value, shared."""


def end_from_result(value: Any, limit: int) -> AttemptEnd:
    """A returned value as its attempt's end. Encoding runs the value's own code (a
    mapping's iteration, a float subclass's `__repr__`), which may raise anything: a value
    that cannot be stored fails its attempt for good (the same code would return it again).
    A returned `heartq.Snooze` is a snooze, as if raised: it is no JSON, so it is told
    apart only once its encoding failed (the hot path pays nothing for it)."""
    if value is None and limit >= len(payload.NULL):
        return RETURNED_NONE
    try:
        return AttemptEnd(
            Outcome.SUCCEEDED, result_json=payload.encode(value, what="result", limit=limit)
        )
    except PayloadError as exc:
        if isinstance(value, Snooze):
            return snoozed_end(value)
        return AttemptEnd(Outcome.FAILED, error=f"PayloadError: {exc}", permanent=True)
    except BaseException as exc:  # noqa: BLE001 - the value's own code raised
        if isinstance(value, Snooze):
            return snoozed_end(value)
        error = f"PayloadError: result could not be encoded\n{describe(exc)}"
        return AttemptEnd(Outcome.FAILED, error=error, permanent=True)


def snoozed_end(snooze: Snooze) -> AttemptEnd:
    """How an attempt whose task raised or returned `snooze` ends: `snoozed`, with the
    delay it asked for and what it said (one line, no traceback: not an error)."""
    return AttemptEnd(Outcome.SNOOZED, error=str(snooze), snooze_for=snooze.seconds)


_pid = os.getpid()
"""This process's id, kept by `os.register_at_fork`: read at each attempt's start rather
than asked of the system (a system call an attempt, about 1 us on this VM)."""


def _forked() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forked)


class _NotInAFork:
    """Around a task's code (`with _NotInAFork():`): a task that forked (`os.fork()`, a
    `fork` start method, any C code's `fork()`) comes back twice, and the copy, which
    holds the worker's connections and locks but none of its threads, is not the
    attempt: it exits at once, before it could report an outcome or write over the
    worker's database sessions. A class rather than a generator's context manager: it
    runs around every attempt."""

    __slots__ = ("_pid",)

    def __enter__(self) -> None:
        self._pid = _pid

    def __exit__(self, *exc_info: object) -> None:
        if os.getpid() != self._pid:
            os._exit(0)


class _Raised:
    """What a sync task raised in the async pool's executor thread, carried back as a
    value: a `GeneratorExit` that crosses `await asyncio.to_thread(...)` as an exception
    can be caught where it is awaited, but comes out of that coroutine again however it
    returns (CPython takes it for the coroutine's closing), so the attempt's end escaped
    `run_async` and its hooks were never told (seen by the chaos runner's hostile family)."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def _call_in_a_thread(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """A sync task's call on the async pool's executor thread: a fork's copy exits
    (`_NotInAFork`), and what it raises comes back as `_Raised`."""
    try:
        with _NotInAFork():
            return fn(**kwargs)
    except BaseException as exc:  # noqa: BLE001 - carried back, raised in the coroutine
        return _Raised(exc)


def _cancelled_by_the_worker(exc: BaseException) -> bool:
    """A `CancelledError` that the pool's cancel of this asyncio task delivered (a
    timeout, a forced cancel, a stop), not one the task's code raised by itself: only the
    former leaves the task `cancelling()`."""
    if not isinstance(exc, asyncio.CancelledError):
        return False
    current = asyncio.current_task()
    return current is not None and current.cancelling() > 0


def end_from_exception(exc: BaseException, cancel_requested: bool) -> AttemptEnd:
    text = describe(exc)
    if isinstance(exc, LeaseLost):
        return AttemptEnd(Outcome.LOST, error=text)
    if isinstance(exc, Snooze):
        return snoozed_end(exc)
    if isinstance(exc, Cancelled | asyncio.CancelledError) and cancel_requested:
        return AttemptEnd(Outcome.CANCELLED, error=text)
    if isinstance(exc, StoreUnavailable) and not cancel_requested:
        return AttemptEnd(Outcome.FAILED, error=text, database_away=True)
    return AttemptEnd(Outcome.FAILED, error=text, permanent=isinstance(exc, Permanent))


class Attempt(NamedTuple):
    """Which attempt of its job a call is, as its task's `retry_delay` is asked: its
    number (1 for the first) and the job's `max_retries` in force."""

    number: int
    max_retries: int


def end_from_call_error(
    exc: BaseException,
    task: Task[Any, Any],
    args: dict[str, Any],
    cancel_requested: bool,
    attempt: Attempt,
) -> AttemptEnd:
    """What the call of a task raised, as its attempt's end: a `TypeError` of arguments
    that cannot bind is `bad_arguments_end`, anything else `end_from_exception`, judged
    by the task's `retry_on`/`dont_retry_on` (`judged`), with the wait its `retry_delay`
    gives (`delayed`)."""
    if isinstance(exc, TypeError):
        refused = arguments.refusal(task.name, task.signature, args)
        if refused is not None:
            return bad_arguments_end(refused)
    end = judged(end_from_exception(exc, cancel_requested), exc, task.retry_rule)
    if task.retry_delay is None:
        return end
    return delayed(end, exc, task.retry_delay, attempt, cancel_requested)


def delayed(
    end: AttemptEnd, exc: BaseException, fn: RetryDelay, attempt: Attempt, cancel_requested: bool
) -> AttemptEnd:
    """`end` with the wait before its retry that its task's `retry_delay` gives for `exc`,
    asked here because only the process where the code raised holds the exception (a
    process-pool child sends the answer up with the end). Asked only of a failure that
    will be retried; a timeout, a crash or a reclaim raised nothing to ask about, so
    the task's other rules decide those, as they do when the function raises or answers
    no wait (`retry_delay_error`, logged by the worker)."""
    if end.outcome is not Outcome.FAILED or end.database_away:
        return end
    if not will_retry(attempt.number, attempt.max_retries, end, cancel_requested):
        return end
    wait, error = asked_delay(fn, attempt.number, exc)
    if wait is None and error is None:
        return end
    return dataclasses.replace(end, retry_delay=wait, retry_delay_error=error)


def run_sync(
    task: Task[Any, Any],
    ctx: JobContext | None,
    control: AttemptControl,
    args: dict[str, Any],
    limit: int,
    attempt: Attempt,
) -> AttemptEnd:
    """Run a task to its end in this thread (an `async def` task gets its own loop),
    inside its app's attempt hooks. `control` is the attempt's (its ctx's) control:
    whether a cancel was requested. `ctx` None: the attempt needs none (`needs_context`),
    so no hooks run around it. `attempt`: which one it is (for its `retry_delay`)."""
    hooked = attempt_hooks(task, ctx, args)
    with hooked:
        try:
            kwargs = task_kwargs(task, ctx, args)
            with _NotInAFork():
                value = asyncio.run(task.fn(**kwargs)) if task.is_async else task.fn(**kwargs)
        except BaseException as exc:  # noqa: BLE001 - everything a task raises is its outcome
            return hooked.ended(
                end_from_call_error(exc, task, args, control.cancel_requested, attempt),
                control,
                exc,
            )
        return hooked.ended(end_from_result(value, limit), control, returned=value)


async def run_async(
    task: Task[Any, Any],
    ctx: JobContext | None,
    control: AttemptControl,
    args: dict[str, Any],
    limit: int,
    attempt: Attempt,
) -> AttemptEnd:
    """Run a task in the current event loop (a sync task goes to a thread), inside its
    app's attempt hooks: they run in this asyncio task, so a context they set is the
    task's (and the thread's of a sync task: `asyncio.to_thread` copies it). `ctx` as
    in `run_sync`."""
    hooked = attempt_hooks(task, ctx, args)
    with hooked:
        try:
            kwargs = task_kwargs(task, ctx, args)
            if task.is_async:
                with _NotInAFork():
                    value = await task.fn(**kwargs)
            else:
                value = await asyncio.to_thread(_call_in_a_thread, task.fn, kwargs)
                if isinstance(value, _Raised):
                    raise value.exc
        except BaseException as exc:  # everything a task raises is its outcome...
            if _cancelled_by_the_worker(exc) and not control.cancel_requested:
                hooked.ended(  # ...but the worker's own cancel (a timeout, a stop) ends it
                    AttemptEnd(Outcome.CANCELLED, error="cancelled by the worker"), control, exc
                )
                raise
            return hooked.ended(
                end_from_call_error(exc, task, args, control.cancel_requested, attempt),
                control,
                exc,
            )
        return hooked.ended(end_from_result(value, limit), control, returned=value)


class _NoHooks:
    """Around an attempt with no attempt hooks to run: nothing at all."""

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc_info: object) -> None:
        pass

    def ended(
        self,
        end: AttemptEnd,
        control: AttemptControl,
        exc: BaseException | None = None,
        returned: Any = None,
    ) -> AttemptEnd:
        return end


_NO_HOOKS = _NoHooks()


def attempt_hooks(
    task: Task[Any, Any], ctx: JobContext | None, args: dict[str, Any]
) -> AttemptHooks | _NoHooks:
    """What runs around one attempt's code: its app's attempt hooks, if it has any (and
    the attempt a context: `needs_context` said so when its context was made)."""
    if ctx is None or not task.app.hooks.attempt:
        return _NO_HOOKS
    return AttemptHooks(task.app.hooks.attempt, ctx, args)


class AttemptHooks:
    """The app's attempt hooks around one attempt's code (`heartq.hooks`)."""

    def __init__(self, hooks: HookList[AttemptInfo], ctx: JobContext, args: dict[str, Any]) -> None:
        self._info = AttemptInfo(
            ctx.ref,
            args=MappingProxyType(args),
            meta=ctx.meta,
            max_retries=ctx.max_retries,
        )
        self._snooze_is_free = ctx.snoozes < ctx.max_snoozes
        self._around = hooks.around([self._info])

    def __enter__(self) -> None:
        self._around.__enter__()

    def __exit__(self, *exc_info: Any) -> None:
        self._around.__exit__(*exc_info)

    def ended(
        self,
        end: AttemptEnd,
        control: AttemptControl,
        exc: BaseException | None = None,
        returned: Any = None,
    ) -> AttemptEnd:
        """Tell the hooks how the code ended (before their after parts run); returns `end`.
        `returned`: what the code returned (a `heartq.Snooze` it returned is told as the
        attempt's `exception`, as if raised)."""
        info = self._info
        cancel_requested = control.cancel_requested
        if exc is None and end.snooze_for is not None and isinstance(returned, Snooze):
            exc = returned
        info.outcome = outcome_of(end, cancel_requested)
        if info.outcome is Outcome.SNOOZED and not self._snooze_is_free:
            info.outcome = Outcome.FAILED  # past its task's max_snoozes: a failed attempt
        info.exception = exc
        info.error = end.error
        info.will_retry = will_retry(
            info.attempt, info.max_retries, end, cancel_requested, self._snooze_is_free
        )
        return end
