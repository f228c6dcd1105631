"""`JobContext`: what a running task knows about its attempt, and how it talks back.

A task calls `ctx.heartbeat(...)` to prove it is alive (tasks with `heartbeat_timeout`
must), to report progress, and to save a checkpoint for the next attempt. Both are kept
in memory and written by the worker's pulse about once a second (one fenced statement
for all its jobs, whatever their number: a task may report as often as it likes), and
the last of them with the attempt's finish. A checkpoint thus reaches the database
within about a second: a crash loses at most the last second's checkpoints, never an
older one. A cancel requested of the job is seen here within about a second too.

`with ctx.transaction() as conn:` lends the task a transaction on the queue's own
database: its writes and its job's completion commit together, fenced by the execution
id, so the effects land exactly once however often the code runs, and with them the
result the task hands to the commit (`ctx.commit_result`; docs/design/pipelines.md, "Effects
exactly once").
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping
from types import MappingProxyType, TracebackType
from typing import Any, Protocol

from heartq.errors import Cancelled, LeaseLost
from heartq.lifecycle.retry import DEFAULT_MAX_SNOOZES
from heartq.model import AttemptRef, NamesARunningAttempt, Progress
from heartq.payload import check_text

_MISSING: Any = object()


class AttemptControl(Protocol):
    """The worker side of one attempt, as a context sees it (in-process or across a pipe)."""

    @property
    def lost(self) -> bool: ...

    @property
    def cancel_requested(self) -> bool: ...

    def touch(self, progress: Progress | None) -> None:
        """Record that the task is alive, with new progress if any."""
        ...

    def save_checkpoint(self, checkpoint: Any) -> None:
        """Keep the checkpoint for the worker to store (its next pulse); raises `LeaseLost`
        if this attempt is known to have been fenced out."""
        ...

    def open_transaction(self) -> contextlib.AbstractContextManager[Any]:
        """A transaction for the task's writes that completes its job when it commits."""
        ...

    def commit_result(self, value: Any) -> None:
        """Keep `value` (encoded now: `PayloadError` if it cannot be stored) as the result
        the open transaction's commit stores with the job's completion; `RuntimeError`
        outside the block."""
        ...


class TaskTransaction:
    """What `ctx.transaction()` returns: a context manager, sync (`with`) or async
    (`async with`), that yields the connection to write on. The async form runs the
    transaction's own statements (begin, the fenced completion, commit) on the event
    loop's thread, like the task's own `conn.execute(...)` calls: they are short."""

    def __init__(self, control: AttemptControl) -> None:
        self._control = control
        self._block: contextlib.AbstractContextManager[Any] | None = None

    def __enter__(self) -> Any:
        self._block = self._control.open_transaction()
        return self._block.__enter__()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._block is not None, "exit without enter"
        return self._block.__exit__(exc_type, exc, tb)

    async def __aenter__(self) -> Any:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        return self.__exit__(exc_type, exc, tb)


class JobContext(NamesARunningAttempt):
    """Passed to a task that has a parameter named `ctx`: its attempt (`ref`, and its
    `job_id`, `task`, `queue`, `attempt`, `execution_id`, `worker_id`), checkpoint,
    retries, snoozes and metadata, and the calls that reach its worker."""

    def __init__(
        self,
        ref: AttemptRef,
        *,
        checkpoint: Any,
        control: AttemptControl,
        max_retries: int = 0,
        meta: Mapping[str, Any] | None = None,
        snoozes: int = 0,
        max_snoozes: int = DEFAULT_MAX_SNOOZES,
    ) -> None:
        self.ref = ref
        self.checkpoint = checkpoint
        self.max_retries = max_retries
        """Retries after the first attempt: `attempt > max_retries` is the last one."""
        self.snoozes = snoozes
        """How many times the job snoozed (`heartq.Snooze`) before this attempt, since it
        was enqueued or replayed: while `snoozes < max_snoozes`, a snooze is not counted
        as an attempt."""
        self.max_snoozes = max_snoozes
        """Its task's bound on snoozes not counted (`max_snoozes`)."""
        self.meta: Mapping[str, Any] = MappingProxyType(dict(meta or {}))
        """The job's metadata (`meta=` at enqueue, what enqueue hooks added), read-only."""
        self._control = control

    @property
    def cancelled(self) -> bool:
        """True once a cancel was requested or this attempt lost its lease: stop soon."""
        return self._control.cancel_requested or self._control.lost

    def heartbeat(
        self,
        progress: float | None = None,
        stage: str | None = None,
        message: str | None = None,
        checkpoint: Any = _MISSING,
    ) -> None:
        """Extend the lease, record progress, optionally save a checkpoint.

        Raises `heartq.LeaseLost` when this attempt no longer owns the job and
        `heartq.Cancelled` when a cancel was requested; `TypeError` for a progress that
        is no finite number or a stage or message that is no text, `ConfigError` for a
        stage or message holding NUL (refused, as in every text a user gives heartq;
        only the errors heartq captures itself are escaped), nothing recorded.
        """
        self._raise_if_stopped()
        has_progress = progress is not None or stage is not None or message is not None
        if progress is not None and (
            not isinstance(progress, int | float)
            or isinstance(progress, bool)
            or not math.isfinite(progress)
        ):
            raise TypeError(f"progress must be a finite number (0.0 to 1.0), got {progress!r}")
        for what, text in (("stage", stage), ("message", message)):
            if text is not None and not isinstance(text, str):
                raise TypeError(f"{what} must be text (a str), got {text!r}")
            if text is not None:  # refused as every text a user gives heartq (names, keys)
                check_text(what, text)
        self._control.touch(Progress(progress, stage, message) if has_progress else None)
        if checkpoint is not _MISSING:
            self._control.save_checkpoint(checkpoint)
            self.checkpoint = checkpoint
        self._raise_if_stopped()

    def transaction(self) -> TaskTransaction:
        """A transaction on the queue's database for this task's own writes, which also
        completes the job: `with ctx.transaction() as conn: conn.execute(...)` (async
        tasks: `async with`). `conn` is a `sqlite3.Connection` on SQLite (`?` or `:name`
        parameters) and a `psycopg.Connection` on PostgreSQL (`%s` parameters, rows as
        dicts, its default search path). When the block ends, the job is marked
        succeeded in the same transaction, fenced by this attempt's execution id; if the
        attempt no longer holds the job, everything rolls back, the task's writes
        included, and `heartq.LeaseLost` is raised. An exception inside the block rolls
        everything back and is the attempt's outcome as usual. Once per attempt. The
        result: hand it to the commit inside the block (`return ctx.commit_result(value)`),
        so it lands with the effects; else what the task returns afterwards is saved a
        moment after the commit, and lost if its worker dies in between (`app.result()`
        then raises `heartq.ResultLost`, a callback receives a `heartq.LostResult`). Do
        not commit or roll back `conn` yourself."""
        self._raise_if_stopped()
        return TaskTransaction(self._control)

    def commit_result(self, value: Any) -> Any:
        """Inside `with ctx.transaction()`: hand `value` to the transaction's commit, which
        stores it as the job's result with the completion and the task's writes (all of
        them land, or none). Returns `value`, so the block can end with
        `return ctx.commit_result(value)`. The job's result is then the value handed (the
        last, if handed more than once), whatever the task returns afterwards; it is never
        lost, whenever the worker dies. `PayloadError` at once for a value that cannot be
        stored (not JSON, over `max_payload_bytes`); `RuntimeError` outside the block."""
        self._control.commit_result(value)
        return value

    def _raise_if_stopped(self) -> None:
        if self._control.lost:
            raise LeaseLost(self.job_id, self.execution_id)
        if self._control.cancel_requested:
            raise Cancelled(f"job {self.job_id} was cancelled")

    def __repr__(self) -> str:
        return (
            f"JobContext(job_id={self.job_id!r}, attempt={self.attempt}, "
            f"execution_id={self.execution_id}, worker_id={self.worker_id!r})"
        )
