"""One attempt as the worker holds it: its lease, liveness, progress, and how it ended.

`RunningJob` is the single record every part of the worker shares: the pool runs it, the
heartbeater renews it, the pulse writes what its task reported, the supervisor times it
out or fences it, the completer saves it (with the task's last report).
Its end is decided once (`end()` is first-wins): whoever comes first, the task returning
or the worker forcing a timeout, a cancel or a lost lease, decides the outcome, and any
later end of the same attempt is ignored. That is what makes a superseded attempt harmless
inside the worker, as fencing does in the database. How it ended is an `AttemptEnd`
(`heartq.lifecycle.fate`); what becomes of the job then, `heartq.lifecycle`.
"""

from __future__ import annotations

import contextlib
import enum
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from heartq import payload
from heartq.errors import LeaseLost
from heartq.lifecycle.fate import AttemptEnd
from heartq.model import ClaimedJob, Outcome, Progress, Report
from heartq.store.interface import LeaseHolder

if TYPE_CHECKING:
    from heartq.app import Task

T = TypeVar("T")


class TransactionState(enum.Enum):
    NONE = "none"
    OPEN = "open"  # the task's ctx.transaction() block runs; its commit is fenced
    COMMITTING = "committing"  # the block ended before the attempt's end was decided:
    # its commit is under way and decides (a forced end waits for it)
    COMMITTED = "committed"  # the job is succeeded; its result was committed with it
    # (`result_committed`) or is saved after


# A no-op job's path reads these members through module names: on Python 3.11, each
# read of a member off its enum class goes through `EnumType.__getattr__`'s hook (0.1 to
# 0.25 us; a plain dict lookup on 3.12), a few of them per job.
_COMMITTING = TransactionState.COMMITTING
SETTLED = frozenset({TransactionState.COMMITTING, TransactionState.COMMITTED})
"""An attempt whose task's transaction commits or committed: its commit decides, not a
deadline (a commit that fails leaves the state `NONE`, and deadlines apply again); read by
whoever ends timeouts (the supervisor, the process pool)."""


class RunningJob:
    """Worker-side state of one attempt. Thread-safe; also the `AttemptControl` of its ctx."""

    def __init__(
        self,
        job: ClaimedJob,
        task: Task[Any, Any] | None,
        store: LeaseHolder,
        *,
        claim_sent_at: float,
        trust_window: float,
        max_payload_bytes: int,
    ) -> None:
        self.job = job
        self.task = task
        self._store = store
        self._limit = max_payload_bytes
        self._lock = threading.Lock()
        self.started = time.monotonic()
        self.last_touch = self.started
        self.trusted_until = claim_sent_at + trust_window
        timeout = task.timeout if task else None
        self.deadline = self.started + timeout if timeout else None
        self.heartbeat_timeout = task.heartbeat_timeout if task else None

    # What every attempt starts with, kept here rather than set on each new attempt (a
    # worker makes one per job): an attempt's own value replaces one when it changes.
    cancel_deadline: float | None = None
    _progress: Progress | None = None
    _checkpoint_json: str | None = None
    _has_checkpoint = False
    _report_version = 0  # bumped by every report of the task
    _written_version = 0  # the newest report a pulse stored
    began: float | None = None
    """When its code began (`code_began`), where its pool says so (a process-pool child);
    None: not said, or not yet."""
    _lost = False
    _cancel_requested = False
    _stopping = False
    _end: AttemptEnd | None = None
    on_flags_changed: Callable[[RunningJob], None] | None = None
    untrusted_reason = "its worker could not renew the lease in time and gave it up"
    """Why its worker gives the attempt back if it stops trusting its lease
    (`Ledger.mark_untrusted`): the reason in the crash context of its `interrupted`
    execution."""
    _in_store = 0  # calls of the task's into the store under way (`in_store`)
    transaction: TransactionState = TransactionState.NONE
    """Where its task's `ctx.transaction()` stands: while it is open the database alone
    decides whether the attempt still holds the job (its commit is fenced); once it
    committed, the job is done and only the result remains to be saved, unless the task
    handed it to the commit (`result_committed`)."""
    _handed_json: str | None = None  # the result the task hands to its commit, encoded
    result_committed = False
    """The task's transaction committed its result with the job (`ctx.commit_result`):
    nothing is left to save."""

    @property
    def store(self) -> LeaseHolder:
        """The store this attempt's lease is held in (its callback's results are read
        there: `worker/invoke.py` `call_args`)."""
        return self._store

    # -- AttemptControl ----------------------------------------------------------------
    @property
    def lost(self) -> bool:
        return self._lost

    @property
    def cancel_requested(self) -> bool:
        """True once a cancel was requested, or the worker stopped the attempt (timeout,
        shutdown): either way the task should stop, and `ctx.heartbeat()` says so."""
        return self._cancel_requested or self._stopping

    def touch(self, progress: Progress | None, *, at: float | None = None) -> None:
        """The task reported (`ctx.heartbeat()`): at `at` (`time.monotonic()`) where that
        was in another process (a process-pool child's report, which its parent may read
        late), else now."""
        with self._lock:
            self.last_touch = time.monotonic() if at is None else at
            if progress is not None:
                self._progress = progress
                self._report_version += 1

    def save_checkpoint(self, checkpoint: Any) -> None:
        self.save_checkpoint_json(payload.encode(checkpoint, what="checkpoint", limit=self._limit))

    @contextlib.contextmanager
    def open_transaction(self) -> Iterator[Any]:
        """`ctx.transaction()` in this process: the task's writes and its job's completion
        in one transaction of the worker's store (`Store.completing`)."""
        if self._lost:
            raise LeaseLost(self.job.id, self.job.execution_id)
        if self.transaction is not TransactionState.NONE:
            raise RuntimeError("ctx.transaction() completes the job: once per attempt")
        self.transaction = TransactionState.OPEN
        try:
            with self._waiting_on_store(
                self._store.completing(self.job.lease, self.last_report, self._handed)
            ) as conn:
                yield conn
                self._begin_commit()
        except BaseException:
            self.transaction = TransactionState.NONE
            self._handed_json = None
            raise
        self.mark_committed(self._handed_json is not None)

    def commit_result(self, value: Any) -> None:
        if self.transaction is not TransactionState.OPEN:
            raise RuntimeError(
                "ctx.commit_result() hands a result to the commit of ctx.transaction(): "
                "call it inside the block"
            )
        self._handed_json = payload.encode(value, what="result", limit=self._limit)

    def _handed(self) -> str | None:
        """The result handed to the commit, as the completion stores it (None: none)."""
        return self._handed_json

    @contextlib.contextmanager
    def in_store(self) -> Iterator[None]:
        """The task waits on the store (a pooled connection, a commit): it is in
        contact, not silent, however long that takes (`is_silent`), and its silence
        counts from when the wait ended. Over a slow link a busy pool kept a task's
        `ctx.transaction()` waiting longer than its `heartbeat_timeout`: the worker
        stopped renewing a live attempt, its lease ran out, and its job ran again."""
        with self._lock:
            self._in_store += 1
        try:
            yield
        finally:
            with self._lock:
                self._in_store -= 1
                self.last_touch = time.monotonic()

    @contextlib.contextmanager
    def _waiting_on_store(self, block: contextlib.AbstractContextManager[T]) -> Iterator[T]:
        """`block`, whose entry and exit (a pooled connection, the commit) are waits on
        the store (`in_store`); what the task does inside is its own."""
        with self.in_store():
            value = block.__enter__()
        try:
            yield value
        except BaseException as exc:
            with self.in_store():
                if not block.__exit__(type(exc), exc, exc.__traceback__):
                    raise
        else:
            with self.in_store():
                block.__exit__(None, None, None)

    def _begin_commit(self) -> None:
        """The task's block ended: commit, unless the worker decided the attempt's end
        meanwhile (a timeout, a forced cancel, a lost lease), which wins over a commit
        not yet begun (`LeaseLost`: everything rolls back). Under the attempt's lock, as
        `end()` is: once the commit is under way, a forced end waits for it instead."""
        with self._lock:
            if self._end is not None:
                raise LeaseLost(self.job.id, self.job.execution_id)
            self.transaction = TransactionState.COMMITTING

    def mark_committed(self, with_result: bool = False) -> None:
        """The job was completed in its task's transaction (here, or in a child), with the
        result the task handed to the commit (`with_result`) or without."""
        self.result_committed = with_result
        self.transaction = TransactionState.COMMITTED

    def save_checkpoint_json(self, checkpoint_json: str) -> None:
        """Keep the checkpoint for the next pulse (and the finish) to store; `LeaseLost`
        once this attempt is known to have lost its job (nothing would store it)."""
        if self._lost:
            raise LeaseLost(self.job.id, self.job.execution_id)
        with self._lock:
            self.last_touch = time.monotonic()
            self._checkpoint_json = checkpoint_json
            self._has_checkpoint = True
            self._report_version += 1

    # -- the worker's side -------------------------------------------------------------
    def last_report(self) -> Report | None:
        """What the task last reported in this attempt (None: nothing), for its finish."""
        with self._lock:
            report = Report(self._progress, self._checkpoint_json, self._has_checkpoint)
        return None if report.empty else report

    def unwritten_report(self) -> tuple[int, Report] | None:
        """The task's latest report with its version, if no pulse has stored it yet."""
        if not self._report_version:  # never reported (most tasks): nothing to take a lock for
            return None
        with self._lock:
            if self._report_version <= self._written_version:
                return None
            report = Report(self._progress, self._checkpoint_json, self._has_checkpoint)
            return self._report_version, report

    def report_to_save(self) -> Report | None:
        """What the attempt's finish must still store of the task's reports: the latest,
        unless a pulse stored it already (then the finish costs no extra statement)."""
        unwritten = self.unwritten_report()
        return None if unwritten is None else unwritten[1]

    def report_written(self, version: int) -> None:
        """A pulse stored the report of this version (newer ones remain to write)."""
        with self._lock:
            self._written_version = max(self._written_version, version)

    @property
    def silent_at(self) -> float | None:
        """When the task overruns its `heartbeat_timeout` unless it reports meanwhile (a
        hang): a deadline of the supervisor's, like `deadline`. None without one, while
        it waits on the store (`in_store`: in contact, not silent; its silence counts
        again from the wait's end), and once its end is decided."""
        if self.heartbeat_timeout is None or self._in_store or self._end is not None:
            return None
        return self.last_touch + self.heartbeat_timeout

    def is_silent(self, now: float) -> bool:
        """True when the task declared a `heartbeat_timeout` and overran it (`silent_at`)."""
        silent_at = self.silent_at
        return silent_at is not None and now > silent_at

    def silent_end(self) -> AttemptEnd:
        """How an attempt whose task went silent past its `heartbeat_timeout` ends: timed
        out, as one past its `timeout` (its code hangs: a failure of the task, retried
        after its backoff; not a crash, whose first is retried at once since a worker
        died), by its own worker, which is alive and says why."""
        return AttemptEnd(
            Outcome.TIMED_OUT,
            error=f"silent for over {self.heartbeat_timeout:g} s: the task did not call "
            "ctx.heartbeat() within its heartbeat_timeout",
        )

    def mark_lost(self) -> None:
        changed = not self._lost
        self._lost = True
        if changed and self.on_flags_changed:
            self.on_flags_changed(self)

    def mark_cancel_requested(self) -> None:
        with self._lock:  # ordered with `end()`: see there
            changed = not self._cancel_requested
            self._cancel_requested = True
        if changed and self.on_flags_changed:
            self.on_flags_changed(self)

    def mark_stopping(self) -> None:
        """The worker decided this attempt's end (timeout, release) but still holds its
        lease until the outcome is saved: unlike `mark_lost`, nothing is given up."""
        changed = not self._stopping
        self._stopping = True
        if changed and self.on_flags_changed:
            self.on_flags_changed(self)

    def allow_start(self, seconds: float) -> None:
        """Its code starts in another process, later (a process-pool child): until
        `code_began` says when, its deadline waits `seconds` more, so a slow start is not
        taken for the task's time, yet a child that never begins is still ended."""
        with self._lock:
            if self.deadline is not None:
                self.deadline += seconds

    def code_began(self, at: float) -> None:
        """Its code began at `at` (`time.monotonic()`, in whichever process of the host):
        its `timeout`, and its silence (`heartbeat_timeout`), count from then. A
        process-pool child says when (the time its parent spent starting it, long on a
        loaded machine, is not the task's)."""
        timeout = self.task.timeout if self.task else None
        with self._lock:
            self.began = at
            self.last_touch = max(self.last_touch, at)
            if timeout:
                self.deadline = at + timeout

    def end(self, end: AttemptEnd) -> bool:
        """Record how the attempt ended; False if it had already ended (this one came late).
        Read what was recorded from `ended`: it may differ from `end`.

        A value returned once the code was told of a cancel request is what the cancel cut
        short (a task may stop on `ctx.cancelled` by returning rather than raising): the
        attempt ends `cancelled`, and the value is not kept. Told means the flag was set
        before this end was recorded (`mark_cancel_requested` takes the same lock), so a
        value returned before the worker heard of the cancel still succeeds. A job its
        task's own transaction completed stays completed.

        An attempt whose code ends (returns, raises or snoozes) after its deadline overran its
        timeout, whether or not the supervisor has come by yet (it runs on its own thread
        and may be late on a loaded machine): it ends `timed_out`, as the supervisor
        would have ended it, so a timeout never depends on that thread's timing. When the
        code ended is `end.ended_at` where its pool knows it (a child's report), else now.

        While its task's transaction commits (`COMMITTING`), no end is recorded: the
        commit decides (the job succeeded, or the commit failed and the code ends as it
        will); the worker forces its end again, if it must, once it knows."""
        # The attempt's own flags are tested before the outcome: on Python 3.11 each read
        # of an enum member off its class costs as much as the rest of this check.
        with self._lock:
            if self._end is not None or self.transaction is _COMMITTING:
                return False
            if (
                self.deadline is not None
                and end.outcome in (Outcome.SUCCEEDED, Outcome.FAILED, Outcome.SNOOZED)
                and (time.monotonic() if end.ended_at is None else end.ended_at) >= self.deadline
                and self.transaction is not TransactionState.COMMITTED
            ):
                end = self.timed_out_end()
            if (
                self._cancel_requested
                and end.outcome is Outcome.SUCCEEDED
                and self.transaction is not TransactionState.COMMITTED
            ):
                end = AttemptEnd(
                    Outcome.CANCELLED, error="cancelled: the task returned after it was told"
                )
            self._end = end
            return True

    def timed_out_end(self) -> AttemptEnd:
        """How an attempt that overran its task's `timeout` ends."""
        timeout = self.task.timeout if self.task else None
        return AttemptEnd(Outcome.TIMED_OUT, error=f"timed out after {timeout:g} s")

    @property
    def ended(self) -> AttemptEnd | None:
        return self._end

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started
