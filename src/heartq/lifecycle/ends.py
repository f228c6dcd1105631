"""How an attempt ended, as the worker learns it: an `AttemptEnd`, named by its `Outcome`.

Every pool (threads, asyncio, a child process), the supervisor (a timeout, a forced
cancel, an untrusted lease) and graceful shutdown report the end of an attempt as one
`AttemptEnd`; its `outcome` is the same word the store keeps with the execution. The
worker's ledger then routes it by who decides the job's fate:

- the worker itself (`heartq.lifecycle.fate.decide`): a `Finish` to save;
- the store, as for every crash (`heartq.lifecycle.reclaimed`): a `CrashedEnd`;
- nobody any more, the task's own transaction having succeeded the job: a `CommittedEnd`,
  whose result alone is left to save;
- `LOST` (report nothing) and `RELEASED` (given back together at shutdown) are not queued.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from heartq.errors import UnknownTask
from heartq.model import Outcome


@dataclass(frozen=True)
class AttemptEnd:
    """The end of one attempt: its `outcome`, and what goes with it (a `result_json` for
    `SUCCEEDED`; an `error` text, `permanent` when retrying is pointless; the `crash`
    context of a child process that died)."""

    outcome: Outcome
    result_json: str | None = None
    error: str | None = None
    permanent: bool = False
    crash: dict[str, Any] | None = None


def unknown_task_end(task: str) -> AttemptEnd:
    """How an attempt of a task this worker does not know ends, on every pool (a child
    process included): failed, with the message `UnknownTask` carries."""
    return AttemptEnd(Outcome.FAILED, error=f"UnknownTask: {UnknownTask(task)}")


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
