"""An attempt its own worker ended: how it ended (`AttemptEnd`), and the fate of its job
that the worker decides: succeeded, retried, dead, cancelled, or waiting for a worker
that knows its task. (An attempt someone else ended is `heartq.lifecycle.crash`.)

Every pool (threads, asyncio, a child process), the supervisor (a timeout, a forced
cancel, an untrusted lease) and graceful shutdown report the end of an attempt as one
`AttemptEnd`; its `outcome` is the same word the store keeps with the execution. The
worker's ledger then routes it by who decides the job's fate:

- the worker itself (`decide`, here): a `Finish` to save, the fenced finish of one
  attempt (tests and benchmarks build them too, to drive a store directly);
- the store, as for every crash (`heartq.lifecycle.crash`): a `CrashedEnd`;
- nobody any more, the task's own transaction having succeeded the job: a `CommittedEnd`,
  whose result alone is left to save;
- `LOST` (report nothing) and `RELEASED` (given back together at shutdown) are not queued;
- nobody yet, its code having failed because the queue's database was away
  (`database_away`): given back once the database answers, `interrupted` and not counted,
  as an untrusted attempt is.

A task that said it is too early (`heartq.Snooze`, raised or returned) is not a failure
either: its job is queued again after the delay it asked for, `snoozed` and not counted,
while the job has snoozed fewer than its task's `max_snoozes` times (`ClaimedJob.snoozes`,
a column the finish counts up); a snooze past that bound is a failed attempt (`snoozed`).

The worker's fates and those of the attempts someone else ended follow the same retry
policy and word the same `dead_reason`s.

An attempt that could not run its task's code at all (`CannotRun`) is not a failure of
that code, and retrying it as one only wastes the retries' waits before the same end:

- arguments that do not bind to the task's parameters, or a task no worker has ever
  declared: dead at once, with that reason (`heartq dlq replay` once the code is fixed
  or deployed);
- a task this worker does not know but some worker has declared (another version, in a
  rolling deploy or a rollback): given back, not counted as an attempt, runnable again
  after `WAIT_FOR_TASK` doubling with each wait up to `WAIT_FOR_TASK_MAX`, so a worker
  that knows it takes it, and one that does not claims it again rarely;
- a job past its expiry (`expires=`) when it would start: `cancelled` at once, its
  execution `released` (not counted as an attempt), the error saying it expired
  (`expired`); its dependents follow it as they follow any cancelled job.

What is kept of an attempt's error, whoever ended it: a traceback can be megabytes (a
recursion, a huge repr); the database keeps its two ends, where the call that failed and
the exception are (`payload.clip_error`, applied again by the store to every error it
writes). Operators read one line first (events, `dead_reason`, `heartq dlq list`): the
traceback's last line (`error_summary`).

What a job becomes when the end of its attempt lands in the store (`finished_status`,
`released_status`, `attempts_after`). The worker decides an attempt's fate (`decide`)
from what it knows; the store applies it to the job's row as the row stands when the write
lands, which may know one thing more: a cancel requested since the worker last looked
(its pulse reads requests about once a second). Two rules follow, and each dialect's
FINISH and RELEASE statements write them in SQL (their `CASE` expressions), because they
must hold in the same statement that fences the write:

- a retry while a cancel is requested ends the job `cancelled` instead: the request is
  honoured, never lost to a retry (the execution keeps its own outcome);
- an attempt that did not run the task's code to an end of its own is not counted: an
  `interrupted` one (its worker lost the database) and a `released` one (given back at
  shutdown, for a worker that knows its task, or claimed ahead and never started); nor
  is a `snoozed` one (its task said it is too early: the worker decided it was within
  the task's bound, `snoozed`, and the statement also counts the job's snoozes).

Those functions are these rules as the model says them; tests/conformance/test_landed.py
walks every way an attempt can end that reaches FINISH or RELEASE (the worker's, a
reclaimer's, a release), under each policy and cancel state, through `decide` or
`crash.after`, these, and each dialect's statements, and fails on any disagreement;
tests/lifecycle/test_fate_table.py holds them to docs/design/job-states.md's table.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any

from heartq.display import plural
from heartq.errors import UnknownTask
from heartq.lifecycle.retry import (
    Backoff,
    RetryDecision,
    RetryOn,
    backoff_delay,
    plan_retry,
    retries_left,
)
from heartq.model import ClaimedJob, Finish, JobStatus, Outcome, Report
from heartq.payload import clip_error

WAIT_FOR_TASK = 5.0
"""A job of a task its worker does not know, declared by another, waits 5 s (+/-25 %)
before it may be claimed again: time for a worker that knows it to take it."""
WAIT_FOR_TASK_MAX = 300.0
"""The wait doubles with each one (5, 10, 20 s ...) up to 5 minutes: a job that waits for
days costs a claim every 5 minutes, not a busy loop."""
NOT_COUNTED = frozenset({Outcome.INTERRUPTED, Outcome.RELEASED, Outcome.SNOOZED})
"""Outcomes of executions that do not count as attempts of the job."""


# -- how an attempt ended ---------------------------------------------------------------
class CannotRun(enum.Enum):
    """Why an attempt could not run its task's code at all: facts the worker found, whose
    fate `cannot_run` decides (no retry can change the first two)."""

    ARGUMENTS = "arguments"
    """The job's arguments do not bind to the task's parameters: the call failed before
    any of the task's code ran."""
    TASK_NOT_DECLARED = "task_not_declared"
    """This worker does not know the task, and no worker has ever declared it."""
    TASK_ELSEWHERE = "task_elsewhere"
    """This worker does not know the task, but a worker has declared it (another
    version, another deployment), or the worker could not read whether one had."""
    EXPIRED = "expired"
    """The job was not started by its expiry (`expires=`): it must not run late."""


@dataclass(frozen=True)
class AttemptEnd:
    """The end of one attempt: its `outcome`, and what goes with it (a `result_json` for
    `SUCCEEDED`; an `error` text, `permanent` when retrying is pointless; the `crash`
    context of a child process that died; `cannot_run` when the task's code could not
    run at all, and why)."""

    outcome: Outcome
    result_json: str | None = None
    error: str | None = None
    permanent: bool = False
    crash: dict[str, Any] | None = None
    cannot_run: CannotRun | None = None
    snooze_for: float | None = None
    """`SNOOZED`: the seconds its task asked to wait before the job runs again
    (`heartq.Snooze`)."""
    retry_delay: float | None = None
    """The wait before the next attempt its task's `retry_delay` function gave (asked
    where the code raised, in whichever process: `heartq.worker.invoke`); None: the
    task's other rules (`retry_intervals`, the schedule) decide."""
    retry_delay_error: str | None = None
    """Why the task's `retry_delay` gave no wait (it raised, or returned no number of
    seconds): the other rules decided, and the worker logs `retry_delay_failed`."""
    database_away: bool = False
    """The code raised `StoreUnavailable`: the queue's database could not be reached or
    written (its `ctx.transaction()` could not begin or commit: a failover, a restart, a
    full disk). Not the job's fault, so not its failure: the worker gives the attempt back
    as it does one it stopped trusting (`interrupted`, not counted; the database decides
    whether a commit whose answer was lost landed)."""
    ended_at: float | None = None
    """When the code ended (`time.monotonic()`, one clock for every process of the host),
    where that is not the moment the worker hears of it: a process-pool child's report,
    which its parent may read late (it was stopped or starved meanwhile). The deadline is
    judged at this time, so a late read does not time out code that ended in time. None:
    now."""


def judged(end: AttemptEnd, exc: BaseException, rule: RetryOn) -> AttemptEnd:
    """`end`, the failure of an attempt whose code raised `exc`, made `permanent` when its
    task's `rule` (`retry_on`, `dont_retry_on`) says no other attempt is worth it. Judged
    where the exception is still at hand (the worker calling the task, in whichever
    process): `permanent` is what crosses to the fate, which decides as for any."""
    if (
        end.outcome is Outcome.FAILED
        and not end.permanent
        and not end.database_away
        and end.cannot_run is None
        and rule.gives_up(exc)
    ):
        return dataclasses.replace(end, permanent=True)
    return end


def unknown_task_end(task: str, declared: bool | None = None) -> AttemptEnd:
    """How an attempt of a task this worker does not know ends: failed, with the message
    `UnknownTask` carries, and whether a worker that knows the task could come
    (`declared`: the task has a declaration; None: unknown, as good as declared, so
    nothing is buried on a guess)."""
    why = CannotRun.TASK_NOT_DECLARED if declared is False else CannotRun.TASK_ELSEWHERE
    return AttemptEnd(Outcome.FAILED, error=f"UnknownTask: {UnknownTask(task)}", cannot_run=why)


EXPIRED_PREFIX = "expired:"
"""How the error of a job that expired unstarted begins (`expired_end`)."""


def expired_end(late: float) -> AttemptEnd:
    """How an attempt of a job past its expiry ends, `late` seconds past it when it
    would have started: none of its code runs (`CannotRun.EXPIRED`; `expired`)."""
    error = f"{EXPIRED_PREFIX} not started by its expiry ({max(late, 0.0):.3f} s past it), not run"
    return AttemptEnd(Outcome.FAILED, error=error, cannot_run=CannotRun.EXPIRED)


def bad_arguments_end(error: BaseException) -> AttemptEnd:
    """How an attempt whose arguments cannot bind to its task's parameters ends (the
    `BadArguments` of `heartq.arguments.bind`): failed, before any of its code ran."""
    return AttemptEnd(
        Outcome.FAILED, error=f"{type(error).__name__}: {error}", cannot_run=CannotRun.ARGUMENTS
    )


@dataclass(frozen=True)
class CrashedEnd:
    """An attempt that ended `CRASHED` in this worker (its child process died): the store
    closes it as any reclaimer would (`Store.crash_attempt`), and decides its fate."""

    end: AttemptEnd


@dataclass(frozen=True)
class CommittedEnd:
    """The end of an attempt whose task completed its job in `ctx.transaction()`: the job
    is succeeded already, whatever the code did after; what it returned is saved."""

    end: AttemptEnd


# -- the fate the worker decides -------------------------------------------------------
def decide(
    job: ClaimedJob, end: AttemptEnd, cancel_requested: bool, report: Report | None = None
) -> Finish:
    """The fenced finish of an attempt of `job` that ended `end` in its worker (not lost,
    crashed or released: those are not the worker's to decide), carrying what its task
    last reported (`report`: progress, checkpoint), saved with it. A failure after a
    cancel request (`cancel_requested`: asked for, or the worker stopped the attempt)
    counts as cancelled: the task was told to stop, and stopping by raising is stopping."""
    finish = _decide(job, end, cancel_requested)
    return finish if report is None else dataclasses.replace(finish, report=report)


def outcome_of(end: AttemptEnd, cancel_requested: bool) -> Outcome:
    """The outcome an attempt's end is judged by: a failure, or a snooze, after a cancel
    request is a cancel (see `decide`): the task was told to stop, and it stopped."""
    if cancel_requested and end.outcome in (Outcome.FAILED, Outcome.SNOOZED):
        return Outcome.CANCELLED
    return end.outcome


def will_retry(
    attempt: int,
    max_retries: int,
    end: AttemptEnd,
    cancel_requested: bool,
    snooze_is_free: bool = True,
) -> bool:
    """Whether the job runs again after this end of its attempt number `attempt` (as its
    worker ends it; the attempt hooks' `will_retry`). `snooze_is_free`: the job has
    snoozed fewer times than its task's `max_snoozes` (a snooze now is not counted)."""
    outcome = outcome_of(end, cancel_requested)
    if outcome is Outcome.FAILED and end.database_away:
        return True  # given back, not counted: it runs again in its place
    if outcome is Outcome.SNOOZED:
        return snooze_is_free or retries_left(attempt, max_retries)
    if outcome not in (Outcome.FAILED, Outcome.TIMED_OUT) or end.cannot_run is not None:
        return False  # an attempt that could not run is not retried (`cannot_run`)
    return retries_left(attempt, max_retries, permanent=end.permanent)


# A no-op job's path reads these members through module names: on Python 3.11, each
# read of a member off its enum class goes through `EnumType.__getattr__`'s hook (0.1 to
# 0.25 us; a plain dict lookup on 3.12), about ten of them a job.
_SUCCEEDED = Outcome.SUCCEEDED
_SUCCEEDED_STATUS = JobStatus.SUCCEEDED


def _decide(job: ClaimedJob, end: AttemptEnd, cancel_requested: bool) -> Finish:
    if end.cannot_run is CannotRun.EXPIRED:  # cancelled either way, and never counted
        return expired(job, end.error or EXPIRED_PREFIX)
    outcome = outcome_of(end, cancel_requested)
    if outcome is _SUCCEEDED:
        return succeeded(job, end.result_json)
    if outcome is Outcome.CANCELLED:
        return cancelled(job, end.error)
    if outcome is Outcome.SNOOZED:
        return snoozed(job, end.snooze_for or 0.0, end.error)
    if outcome is Outcome.FAILED and end.cannot_run is not None:
        return cannot_run(job, end.cannot_run, end.error or "")
    outcome = Outcome.TIMED_OUT if outcome is Outcome.TIMED_OUT else Outcome.FAILED
    return failed(
        job, outcome, end.error or "failed", permanent=end.permanent, delay=end.retry_delay
    )


def succeeded(job: ClaimedJob, result_json: str | None) -> Finish:
    """The attempt returned `result_json`: the job is done."""
    return Finish(job.lease, _SUCCEEDED, _SUCCEEDED_STATUS, result_json=result_json)


def cancelled(job: ClaimedJob, error: str | None = None) -> Finish:
    """The attempt stopped after a cancel request: the job is never run again."""
    return Finish(
        job.lease, Outcome.CANCELLED, JobStatus.CANCELLED, error=clip_error(error or "cancelled")
    )


def failed(
    job: ClaimedJob,
    outcome: Outcome,
    error: str,
    *,
    permanent: bool = False,
    crash: dict[str, Any] | None = None,
    delay: float | None = None,
) -> Finish:
    """An attempt that raised (`FAILED`), overran its timeout (`TIMED_OUT`) or whose child
    process died (`CRASHED`): retry with backoff (`delay`, its task's `retry_delay`'s
    answer, when it gave one), or dead once retries are spent."""
    plan = plan_retry(
        job.attempt,
        job.max_retries,
        job.retry_backoff,
        job.retry_backoff_max,
        permanent=permanent,
        backoff=Backoff(job.retry_schedule, job.retry_jitter, job.retry_intervals),
    )
    error = clip_error(error) or ""
    if plan.decision is RetryDecision.RETRY:
        wait = plan.delay if delay is None else delay
        return Finish(
            job.lease, outcome, JobStatus.QUEUED, error=error, retry_delay=wait, crash=crash
        )
    return Finish(
        job.lease,
        outcome,
        JobStatus.DEAD,
        error=error,
        dead_reason=dead_reason(outcome, job.attempt, error, permanent=permanent),
        crash=crash,
    )


def snoozed(job: ClaimedJob, delay: float, reason: str | None = None) -> Finish:
    """Its task said it is too early (`heartq.Snooze`): the job is queued again, runnable
    `delay` seconds from now. Within its task's bound (the job has snoozed fewer than
    `max_snoozes` times) the attempt is `snoozed`, not counted, and its execution keeps
    what the task said (`reason`: "snoozed for 30 s: ..."). Past it, the snooze is a
    failed attempt, counted like any: queued again after the same delay while retries
    are left, else dead (`failed 4 attempts; last error: ... past its max_snoozes`)."""
    said = reason or f"snoozed for {delay:g} s"
    if job.snoozes < job.max_snoozes:
        return Finish(
            job.lease, Outcome.SNOOZED, JobStatus.QUEUED, error=clip_error(said), retry_delay=delay
        )
    error = (
        f"{said}\nSnoozedTooOften: the job had snoozed {plural(job.snoozes, 'time')} "
        f"already (its task's max_snoozes): this snooze counts as a failed attempt"
    )
    if retries_left(job.attempt, job.max_retries):
        return Finish(job.lease, Outcome.FAILED, JobStatus.QUEUED, error=error, retry_delay=delay)
    return Finish(
        job.lease,
        Outcome.FAILED,
        JobStatus.DEAD,
        error=error,
        dead_reason=dead_reason(Outcome.FAILED, job.attempt, error),
    )


def cannot_run(job: ClaimedJob, why: CannotRun, error: str) -> Finish:
    """An attempt that could not run its task's code (`why`): dead at once when no retry
    can change that, else waiting for a worker that knows the task (`waiting_for_task`)."""
    if why is CannotRun.TASK_ELSEWHERE:
        return waiting_for_task(job, error)
    return Finish(
        job.lease,
        Outcome.FAILED,
        JobStatus.DEAD,
        error=clip_error(error) or "",
        dead_reason=cannot_run_reason(why, job.task, error),
    )


def expired(job: ClaimedJob, error: str) -> Finish:
    """A job past its expiry when it would start: `cancelled`, never run, its execution
    `released` so no attempt is counted (FINISH takes back the one its claim counted).
    Its dependents are settled as for any cancelled job."""
    return Finish(job.lease, Outcome.RELEASED, JobStatus.CANCELLED, error=clip_error(error))


def is_expiry(finish: Finish) -> bool:
    """Whether `finish` is a job's expiry (`expired`): no other fate a worker decides
    cancels a job with an execution that is not counted."""
    return finish.outcome is Outcome.RELEASED and finish.status is JobStatus.CANCELLED


def waiting_for_task(job: ClaimedJob, error: str) -> Finish:
    """Give the job back for a worker that knows its task: `released`, so not counted as
    an attempt, and runnable again after a wait that doubles with each execution of the
    job that was not counted (these waits, shutdown releases, interruptions: the
    difference between its execution id and its attempts, less its snoozes), so the
    worker that does not
    know the task claims it again rarely."""
    waits = max(0, job.execution_id - job.attempt - job.snoozes)
    delay = backoff_delay(waits + 1, WAIT_FOR_TASK, WAIT_FOR_TASK_MAX)
    return Finish(
        job.lease,
        Outcome.RELEASED,
        JobStatus.QUEUED,
        error=clip_error(error),
        retry_delay=delay,
        waits_for_task=True,
    )


def cannot_run_reason(why: CannotRun, task: str, error: str | None) -> str:
    """The `dead_reason` of a job that could never run: one line saying why, and what
    brings it back."""
    if why is CannotRun.ARGUMENTS:
        return f"its arguments do not fit the task, not retried: {error_summary(error)}"
    return (
        f"unknown task {task!r}: no worker has declared it (replay the job once a worker "
        "that registers it has started)"
    )


def dead_reason(
    outcome: Outcome, attempts: int, error: str | None, *, permanent: bool = False, crashes: int = 0
) -> str:
    """One line an operator reads in `heartq dlq list`: why this job stopped retrying."""
    last = error_summary(error)
    if permanent:
        return f"permanent failure: {last}" if last else "permanent failure"
    tries = plural(attempts, "attempt")
    if outcome is Outcome.CRASHED and crashes >= attempts:
        return f"crashed {plural(crashes, 'worker')} in {tries}; last: {last}"
    if outcome is Outcome.CRASHED:
        return f"retries exhausted after {tries} ({crashes} crashed); last: {last}"
    if outcome is Outcome.TIMED_OUT and attempts == 1:
        return f"timed out on its only attempt; {last}"
    if outcome is Outcome.TIMED_OUT:
        return f"timed out on the last of {tries}; {last}"
    return f"failed {tries}; last error: {last}"


# -- what an operator reads of an error ------------------------------------------------
def error_summary(text: str | None) -> str:
    """The line of an error an operator reads first: a traceback's last line (the
    exception and its message), at most 300 characters."""
    if not text:
        return ""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip()[:300] if lines else ""


# -- how a fate lands in the store -----------------------------------------------------
def cancel_wins(status: JobStatus, cancel_requested: bool) -> JobStatus:
    """A job about to be queued again (a retry, a reclaim, a release) whose cancel was
    requested is cancelled instead: the request is honoured, never lost to a retry."""
    return JobStatus.CANCELLED if status is JobStatus.QUEUED and cancel_requested else status


def finished_status(finish: Finish, cancel_requested: bool) -> JobStatus:
    """The job's status once `finish` lands on a row whose `cancel_requested` is as given."""
    return cancel_wins(finish.status, cancel_requested)


def released_status(cancel_requested: bool) -> JobStatus:
    """The job's status once a release of its attempt lands (the worker gives it back,
    unstarted or at shutdown): queued again, or cancelled if a cancel was requested."""
    return cancel_wins(JobStatus.QUEUED, cancel_requested)


def attempts_after(attempts: int, outcome: Outcome) -> int:
    """The job's count of attempts once an execution that ended `outcome` lands (the
    claim counted it: one not counted is taken back)."""
    return max(attempts - 1, 0) if outcome in NOT_COUNTED else attempts
