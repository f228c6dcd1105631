"""Every exception heartq raises, in one place.

Hierarchy::

    HeartqError
    ├── ConfigError          bad settings or URL (also a ValueError)
    ├── PayloadError         arguments that are not JSON or too large (also a ValueError)
    ├── UnknownTask          a worker was handed a task it does not know
    ├── BadArguments         a job's arguments do not fit its task's parameters (a TypeError)
    ├── TaskNotDeclared      strict enqueue of a task no worker has declared (a ConfigError)
    ├── JobNotFound          no job with that id (also a LookupError)
    ├── AmbiguousJobId       a shortened job id matches several jobs (also a LookupError)
    ├── DuplicateJob         a job id given at enqueue already exists
    ├── DependencyNotFound   a job's `depends_on` names no job (also a ValueError)
    ├── StoreUnavailable     the database cannot be opened, reached or written
    │   ├── StoreBusy        the database stayed locked past the busy timeout
    │   └── StoreRefused     refused for good: auth, no such database, SQLite directory missing
    ├── LeaseLost            this attempt no longer owns its job (fencing refused a write)
    ├── Cancelled            a cancel was requested for the running job
    ├── JobDead              `App.result`: the job ended in the dead-letter queue
    ├── JobCancelled         `App.result`: the job was cancelled
    ├── ResultLost           `App.result`: the job succeeded, but its result was lost
    └── ResultTimeout        `App.result`: the job did not end in time (also a TimeoutError)

    Permanent                raised by task code: skip retries, go to the dead-letter queue
    Snooze                   raised (or returned) by task code: too early, run again later,
                             not counted as an attempt

    TaskNotDeclaredWarning   a warning (`warnings.warn`): a job of a task no worker has
                             declared yet was stored with the defaults

`Permanent` and `Snooze` are deliberately not `HeartqError`s: they are the user's
signals to heartq, not heartq's to the user.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for annotations only: every process imports the errors, not the model
    from heartq.model import JobMatch


class HeartqError(Exception):
    """Base class of the errors heartq raises."""


class ConfigError(HeartqError, ValueError):
    """A setting, URL or option is invalid; the message says which and why."""


class PayloadError(HeartqError, ValueError):
    """Job arguments (or a result/checkpoint) cannot be stored: not JSON, or too large."""


class UnknownTask(HeartqError):
    """A job names a task that the worker's app has not registered. The worker ends the
    attempt with this error's text; the job waits for a worker that knows the task if
    one has declared it, else it is dead at once (`heartq.lifecycle.fate`)."""

    def __init__(self, task: str) -> None:
        super().__init__(
            f"task {task!r} is not registered in this worker's app "
            "(deploy the code that defines it, or cancel the job)"
        )
        self.task = task


class BadArguments(HeartqError, TypeError):
    """A job's arguments do not fit its task's parameters: a required one is missing, one
    it does not take is given, or too many are given by position. Python's own message,
    after the task's name (`task 'crunch': got an unexpected keyword argument 'nmae'`).
    Raised at enqueue (nothing is stored); a job stored anyway (by a worker of a version
    whose parameters differ) is dead at its first attempt with this reason."""


class RenamedWarning(DeprecationWarning):
    """Warned when a name heartq renamed is used (a setting, a variable, an event, an
    attribute: docs/INTERFACE.md, "Renamed names", lists them): it still
    works, for one version. A `DeprecationWarning`, which `heartq`'s commands show (a
    worker started with an old variable says so on stderr)."""


class TaskNotDeclaredWarning(UserWarning):
    """Warned (`warnings.warn`) by an enqueue of a task that neither the enqueuing program
    registers nor any worker has declared yet: its jobs were stored with the default
    queue and policy, until a worker declares the task (`App(strict_tasks=True)`
    refuses such an enqueue instead). `task`: the task's name."""

    def __init__(self, message: str, task: str) -> None:
        super().__init__(message)
        self.task = task


class TaskNotDeclared(ConfigError):
    """A strict enqueue (`App(strict_tasks=True)`, `heartq enqueue --strict`) named a task
    that neither this program registers nor any worker has declared; nothing is stored."""

    def __init__(self, task: str) -> None:
        super().__init__(
            f"task {task!r} is not declared: no worker has started with it, and this program "
            "does not register it (strict mode refuses such an enqueue)"
        )
        self.task = task


class JobNotFound(HeartqError, LookupError):
    """No job has the given id."""

    def __init__(self, job_id: str, hint: str = "") -> None:
        super().__init__(f"no job with id {job_id!r}" + (f" ({hint})" if hint else ""))
        self.job_id = job_id


class AmbiguousJobId(HeartqError, LookupError):
    """A shortened job id names more than one job (it starts or ends several ids): the
    caller must type more of it. `candidates`: a few of them, with their task and status,
    so the message alone says which is which; `more`: others match too."""

    def __init__(self, ref: str, candidates: Sequence[JobMatch], more: bool) -> None:
        shown = ", ".join(f"{c.id} ({c.task}, {c.status})" for c in candidates)
        count = f"more than {len(candidates)}" if more else str(len(candidates))
        super().__init__(
            f"job id {ref!r} is ambiguous: {count} jobs match ({shown}{', ...' if more else ''})"
            "; type more of it (ids made together share their start: their last 8 "
            "characters tell them apart)"
        )
        self.ref = ref
        self.candidates = list(candidates)
        self.matches = [c.id for c in candidates]


class DuplicateJob(HeartqError):
    """A job id given at enqueue already exists; nothing of that batch was stored."""


class AlreadyEnqueued(HeartqError):
    """An enqueue with `on_conflict="raise"` met a job already holding its `unique_key`:
    that job was not stored (`job_id`: the id of the job holding the key; `key`: the key;
    `ids`: every id the enqueue answered, in order, the holders' included: the other jobs
    of a batch were stored)."""

    def __init__(self, job_id: str, key: str, ids: Sequence[str]) -> None:
        self.job_id = job_id
        self.key = key
        self.ids = list(ids)
        super().__init__(f"job {job_id} already holds unique key {key!r}: nothing stored")


class DependencyNotFound(HeartqError, ValueError):
    """An enqueue's `depends_on` names a job that does not exist (not stored, not in the
    same batch, not enqueued earlier in the same transaction; or pruned, unless it
    succeeded and is younger than `success_trace_retention`: such a one counts as
    succeeded); nothing of that batch was stored. `job_ids`: the ids not found."""

    def __init__(self, job_ids: Sequence[str]) -> None:
        shown = ", ".join(repr(job_id) for job_id in job_ids[:5])
        more = f" and {len(job_ids) - 5} more" if len(job_ids) > 5 else ""
        super().__init__(
            f"depends_on names no job {shown}{more}: a dependency must be stored already, "
            "in the same batch, or enqueued earlier in the same transaction (or have "
            "succeeded and been pruned within success_trace_retention of its creation)"
        )
        self.job_ids = list(job_ids)


class StoreUnavailable(HeartqError):
    """The database cannot be opened, reached or written (missing directory, read-only, down).

    Transient by nature: whatever the cause, heartq retries and carries on once the database
    answers again. `reason` names the cause in one word, so a worker logs a state change
    once (`store_unavailable`) instead of every failed attempt: `disk_full`, `read_only`,
    `file_gone` (the SQLite file was deleted or replaced), `locked`, or `unavailable`.
    """

    def __init__(self, message: str, reason: str = "unavailable") -> None:
        super().__init__(message)
        self.reason = reason


class StoreBusy(StoreUnavailable):
    """The database stayed locked by other writers for longer than the busy timeout."""

    def __init__(self, message: str, reason: str = "locked") -> None:
        super().__init__(message, reason)


class StoreRefused(StoreUnavailable):
    """The database refused this client for a reason that waiting will not fix: the
    PostgreSQL server answered that authentication failed, that the role or the database
    does not exist or that the connection options are malformed, or a pooler in
    transaction mode that heartq was not told of answered (`reason` `pooler`: the
    message names `?pooler=transaction`); the SQLite file's
    directory does not exist or may not be written. Raised at the first attempt, without
    the connect timeout's wait, and never retried: a worker waiting for its database
    gives up at once on it, since a server that is down, full or starting up answers
    differently."""


class LeaseLost(HeartqError):
    """This attempt no longer owns its job: it was reclaimed and another execution may hold it.

    Raised by fenced writes (`ctx.heartbeat`, checkpoint saves) whose `(job_id, execution_id)`
    no longer matches a running job. Nothing of the superseded attempt is stored.
    """

    def __init__(self, job_id: str, execution_id: int) -> None:
        super().__init__(f"lease lost for job {job_id} (execution {execution_id})")
        self.job_id = job_id
        self.execution_id = execution_id


class Cancelled(HeartqError):
    """A cancel was requested for this job; the task should stop."""


class Permanent(Exception):
    """Raise (or subclass) in a task to fail the job at once, with no retry."""


class Snooze(Exception):
    """Raise (or return) in a task when it is too early to do its work (an API answered
    429 with Retry-After, a file is not there yet): the job is queued again, runnable
    `seconds` from now (a number, or a `datetime.timedelta`), and the attempt is not
    counted against `max_retries`; its execution is recorded `snoozed`, with `reason`.

    Bounded: a job's first `max_snoozes` snoozes (a task option, 100 by default) are
    free; a snooze past them is a failed attempt (counted, retried after the same delay
    while retries are left, else the job is dead), so a job cannot snooze forever
    unnoticed. `ctx.snoozes` says how many times the job snoozed so far. `ConfigError`
    (here, in the task: its attempt fails) for a delay that is not a finite number of
    seconds from 0."""

    def __init__(self, seconds: float | datetime.timedelta, reason: str | None = None) -> None:
        if isinstance(seconds, datetime.timedelta):
            seconds = seconds.total_seconds()
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise ConfigError(f"Snooze takes a number of seconds, got {seconds!r}")
        if not math.isfinite(seconds) or seconds < 0:
            raise ConfigError(f"Snooze takes a finite number of seconds from 0, got {seconds!r}")
        if reason is not None and not isinstance(reason, str):
            raise ConfigError(f"Snooze's reason is text (a str), got {reason!r}")
        self.seconds = float(seconds)
        self.reason = reason
        super().__init__(self.seconds, reason)

    def __str__(self) -> str:
        said = f"snoozed for {self.seconds:g} s"
        return f"{said}: {self.reason}" if self.reason else said


class JobDead(HeartqError):
    """`App.result()`: the job used up its attempts (or failed permanently) and is dead;
    or, asked for a job that waits for it (`blocked`, down a pipeline), the dead job that
    holds it: `job_id` and `error` are the dead job's own, `blocked` the job asked for
    (None when it is the dead job itself). Replaying the dead job unblocks them."""

    def __init__(
        self,
        job_id: str,
        error: str | None,
        dead_reason: str | None,
        blocked: str | None = None,
    ) -> None:
        last = (error or "").strip().splitlines()[-1:] or ["no error recorded"]
        held = "" if blocked is None else f" (job {blocked} is blocked until it is replayed)"
        super().__init__(f"job {job_id} is dead ({dead_reason or 'dead'}): {last[0]}{held}")
        self.job_id = job_id
        self.error = error
        self.dead_reason = dead_reason
        self.blocked = blocked


class JobCancelled(HeartqError):
    """`App.result()`: the job was cancelled before it could finish. Its message is one
    line: who asked (`cancelled_by`, as stored) and how the job ended, from the last line
    of its `error` (the traceback of the `Cancelled` heartq raised in its code says only
    that its task stopped at the request, and is kept whole in `.error`)."""

    def __init__(self, job_id: str, error: str | None, cancelled_by: str | None = None) -> None:
        said = f"job {job_id} was cancelled" + (f" by {cancelled_by}" if cancelled_by else "")
        last = _last_line(error)
        if last.startswith(f"{Cancelled.__module__}.{Cancelled.__qualname__}:"):
            said += ": its task stopped at the request"
        elif last and last != "cancelled":
            said += f": {last}"
        super().__init__(said)
        self.job_id = job_id
        self.error = error
        self.cancelled_by = cancelled_by


def _last_line(text: str | None) -> str:
    """The last line of a stored error (a traceback's: its exception), at most 300
    characters."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


class ResultLost(HeartqError):
    """`App.result()`: the job succeeded (its task's transaction committed it, its effects
    with it), but its result was lost: its worker stopped between that commit and the save
    of what the task returned after it, or the code failed after the commit (`.reason`).
    A task that hands its result to the commit (`ctx.commit_result`) never loses it."""

    def __init__(self, job_id: str, reason: str) -> None:
        super().__init__(f"job {job_id} succeeded, but its result was lost: {reason}")
        self.job_id = job_id
        self.reason = reason


class ResultTimeout(HeartqError, TimeoutError):
    """`App.result(timeout=...)`: the job had not ended when the wait ran out."""

    def __init__(self, job_id: str, timeout: float, status: str) -> None:
        super().__init__(f"job {job_id} did not end within {timeout:g} s (it is {status})")
        self.job_id = job_id
        self.timeout = timeout
        self.status = status
