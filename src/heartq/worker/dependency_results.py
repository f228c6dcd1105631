"""What a callback is called with: its dependencies' results, read before the call.

A job flagged `dependency_results` (a group's callback, `heartq.group`) takes the
results of the jobs it waited for, in their order, as its first parameter. Its worker
reads them once, just before it calls the task (one read, only for such jobs: every
other job is called with its arguments as they are).

One wait: a dependency its task completed inside `ctx.transaction()` is succeeded at
that commit (which released this job), and its result is saved a moment after
(`result_pending`). The read then says the result is still to come, and is made again
(20 ms, doubling to 0.5 s) until it came, or a reaper gave it up once the lease of the
attempt that committed it ran out (its worker died between the two: the job succeeded
with no result, and the callback gets None for it, as `App.result` would; a save after
that is refused, so the None stays true). Where it runs: in the attempt's own
thread (a thread-pool attempt), off the event loop (async), or in a thread that then
starts the child (process pool), never in the fetch loop.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from heartq import arguments
from heartq.errors import BadArguments
from heartq.lifecycle.fate import AttemptEnd, bad_arguments_end
from heartq.model import JobStatus
from heartq.worker.invoke import end_from_exception

if TYPE_CHECKING:
    from heartq.worker.attempt import RunningJob

FIRST_WAIT = 0.02
"""Seconds before the first re-read of a result still to come; doubled at each one."""
LONGEST_WAIT = 0.5
"""At most this long between re-reads."""


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
        return {**job.args, name: _results(run)}
    except Exception as exc:  # noqa: BLE001 - the database's error is the attempt's
        return end_from_exception(exc, cancel_requested=False)


def _results(run: RunningJob) -> list[Any]:
    """Each dependency's result in order (None for one that did not succeed, or is
    gone), once none is still to come, or the attempt was stopped meanwhile."""
    wait = FIRST_WAIT
    while True:
        ends = run.store.dependency_results(run.job.id)
        if not any(end.pending for end in ends) or run.ended is not None or run.lost:
            return [end.result if end.status is JobStatus.SUCCEEDED else None for end in ends]
        time.sleep(wait)
        wait = min(wait * 2, LONGEST_WAIT)
