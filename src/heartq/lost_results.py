"""A result that was lost, as its readers meet it: never a bare `None`.

A job its task completed inside `ctx.transaction()` succeeded at that commit, its
effects with it. What the task returns after the block is saved a moment later; when
that save never comes (its worker died, froze or lost the database between the commit
and the save, and a lease reclaimer gave the result up once the committing attempt's lease ran
out), or the task's code failed after the commit, the job succeeded without a result.
Its row says why (`result_lost`, schema v29), and readers are told:

- `App.result()` raises `heartq.ResultLost` (its `.reason`);
- a job that takes the result (a group's callback, a step made with `takes_result()`)
  receives a `LostResult` in its place: a `dict` (so it stays JSON, whatever the
  callback does with it: passes it on, stores it in its own result) of exactly
  `{"$heartq": "lost_result", "job_id": ..., "reason": ...}`, told from any value by
  `heartq.is_lost_result(value)` (by its type, or by that shape once it went through
  JSON). A dependency's result that went with its job (pruned by retention before the
  job that takes it read it) reads the same way.

A task that hands its result to the commit (`return ctx.commit_result(value)` inside the
block) never loses it: the result lands with the effects, in the same transaction
(docs/design/pipelines.md, "Effects exactly once").

Imports nothing of heartq: the store, the worker and the app all read it.
"""

from __future__ import annotations

from typing import Any

MARKER_KEY = "$heartq"
MARKER_VALUE = "lost_result"

AFTER_COMMIT = (
    "its worker stopped after the task's transaction committed the job, before saving "
    "what the task returned (the attempt's lease ran out)"
)
"""Why a result given up by a lease reclaimer (`GIVE_UP_RESULTS`) is lost."""
PRUNED = "its job was pruned (success retention) before this job read its result"
"""Why a dependency's result gone with its job is lost."""


def failed_after_commit(outcome: str, error: str) -> str:
    """Why the result of a task whose code ended otherwise after its transaction
    committed the job is lost: `outcome` (failed, timed_out, cancelled, crashed), `error`
    its one line."""
    return (
        f"the task's code ended {outcome} after its transaction committed the job: "
        f"{error or 'no error recorded'}"
    )


class LostResult(dict[str, Any]):
    """What a job that takes results receives in place of a result that was lost: a
    `dict`, `{"$heartq": "lost_result", "job_id": ..., "reason": ...}`, so that it is
    JSON like any result. `job_id`: the job whose result was lost; `reason`: why."""

    def __init__(self, job_id: str, reason: str) -> None:
        super().__init__({MARKER_KEY: MARKER_VALUE, "job_id": job_id, "reason": reason})

    @property
    def job_id(self) -> str:
        return str(self["job_id"])

    @property
    def reason(self) -> str:
        return str(self["reason"])

    def __reduce__(self) -> tuple[Any, ...]:
        # a process-pool child receives its callback's results pickled
        return (LostResult, (self.job_id, self.reason))

    def __repr__(self) -> str:
        return f"LostResult(job_id={self.job_id!r}, reason={self.reason!r})"


def is_lost_result(value: object) -> bool:
    """Whether `value` stands for a lost result: a `LostResult`, or a `dict` of exactly its
    shape (one that went through JSON: a callback's own result that passed it on)."""
    if isinstance(value, LostResult):
        return True
    return (
        isinstance(value, dict)
        and value.keys() == {MARKER_KEY, "job_id", "reason"}
        and value[MARKER_KEY] == MARKER_VALUE
    )
