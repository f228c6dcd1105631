"""How an attempt ended, as the worker learns it: an `AttemptEnd`, named by its `Outcome`.

Every pool (threads, asyncio, a child process), the supervisor (a timeout, a forced
cancel, an untrusted lease) and graceful shutdown report the end of an attempt as one
`AttemptEnd`; its `outcome` is the same word the store keeps with the execution. The
worker's ledger then routes it by who decides the job's fate:

- the worker itself (`heartq.lifecycle.fate.decide`): a `Finish` to save;
- the store, as for every crash (`heartq.lifecycle.crash`): a `CrashedEnd`;
- nobody any more, the task's own transaction having succeeded the job: a `CommittedEnd`,
  whose result alone is left to save;
- `LOST` (report nothing) and `RELEASED` (given back together at shutdown) are not queued;
- nobody yet, its code having failed because the queue's database was away
  (`database_away`): given back once the database answers, `interrupted` and not counted,
  as an attempt the worker stopped trusting is.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any

from heartq.errors import UnknownTask
from heartq.lifecycle.retry import RetryOn
from heartq.model import Outcome


class CannotRun(enum.Enum):
    """Why an attempt could not run its task's code at all: facts the worker found, whose
    fate `heartq.lifecycle.fate` decides (no retry can change the first two)."""

    ARGUMENTS = "arguments"
    """The job's arguments do not bind to the task's parameters: the call failed before
    any of the task's code ran."""
    TASK_NOT_DECLARED = "task_not_declared"
    """This worker does not know the task, and no worker has ever declared it."""
    TASK_ELSEWHERE = "task_elsewhere"
    """This worker does not know the task, but a worker has declared it (another
    version, another deployment), or the worker could not read whether one had."""


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
    database_away: bool = False
    """The code raised `StoreUnavailable`: the queue's database could not be reached or
    written (its `ctx.transaction()` could not begin or commit: a failover, a restart, a
    full disk). Not the job's fault, so not its failure: the worker gives the attempt back
    as it does one it stopped trusting (`interrupted`, not counted; the database decides
    whether a commit whose answer was lost landed)."""


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
