"""The child side of the process pool: runs attempts its parent sends, one at a time,
and talks to its parent over a pipe.

A child runs one attempt and exits, unless its worker reuses children
(`--max-jobs-per-child N`): then it waits for the next attempt after each, until the
parent says an attempt is its last (the child exits once it has reported it) or tells
it to exit (its memory passed the ceiling, the pool closes). It reports each attempt's
end, with its resident memory then, before anything else: a recycled child never takes
its last job with it.

Messages, parent to child: `("job", fields, last)`, `("flags", job_id, execution_id,
lost, cancel_requested)` (for that attempt only: one that comes late, after its attempt
ended, is ignored), `("checkpoint", "ok" | "lost" | error text)` (the answer to the
child's), `("exit",)`. Child to parent: `("began", monotonic time)` (its code begins: its
timeout counts from then), `("touch", progress | None, monotonic time)`, `("checkpoint", json)`,
`("transaction", state, with_result)` (where its `ctx.transaction()` stands;
committed with the result the task handed to the commit, or not), `("done", AttemptEnd
fields, rss)` (with the wait its task's `retry_delay` gave: the exception it was asked
about exists only here; when its code ended, `time.monotonic()` being one clock for the
host's processes; `rss`: the child's resident memory in bytes, or None).
The child dies with its parent: it asks the kernel for SIGKILL when the parent goes
(Linux), and exits when the pipe closes.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import importlib
import os
import queue
import resource
import signal
import sys
import threading
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

from heartq import events, payload
from heartq.context import JobContext
from heartq.errors import LeaseLost, PayloadError
from heartq.lifecycle.fate import AttemptEnd, unknown_task_end
from heartq.model import AttemptRef, Lease, Outcome, Progress, Report
from heartq.store import open_store
from heartq.worker import tracing
from heartq.worker.attempt import TransactionState
from heartq.worker.invoke import Attempt, run_sync

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class ChildControl:
    """`AttemptControl` over the pipe to the parent worker."""

    def __init__(
        self, conn: Connection, limit: int, lease: Lease, url: str, send_lock: threading.Lock
    ) -> None:
        self._conn = conn
        self._limit = limit
        self._lease = lease
        self._url = url
        self._send_lock = send_lock
        self._reply = threading.Condition()
        self._answer: str | None = None
        self.lost = False
        self.cancel_requested = False
        self._report = Report()
        """What the task last reported, also kept here: its `ctx.transaction()` saves it
        with the completion it commits (the parent's copy is fenced out by then)."""
        self._open = False
        self._handed: str | None = None
        """The result the task handed to its transaction's commit, encoded."""

    def _send(self, message: tuple[Any, ...]) -> None:
        with self._send_lock:
            self._conn.send(message)

    def touch(self, progress: Progress | None) -> None:
        fields = None if progress is None else (progress.value, progress.stage, progress.message)
        if progress is not None:
            self._report = dataclasses.replace(self._report, progress=progress)
        self._send(("touch", fields, time.monotonic()))

    def save_checkpoint(self, checkpoint: Any) -> None:
        text = payload.encode(checkpoint, what="checkpoint", limit=self._limit)
        self._report = dataclasses.replace(self._report, checkpoint_json=text, has_checkpoint=True)
        with self._reply:
            self._answer = None
            self._send(("checkpoint", text))
            while self._answer is None:
                self._reply.wait()
            answer = self._answer
        if answer == "lost":
            raise LeaseLost("", 0)
        if answer != "ok":
            raise PayloadError(answer)

    @contextlib.contextmanager
    def open_transaction(self) -> Iterator[Any]:
        """`ctx.transaction()` in a child: on a store of the child's own (opened for it,
        closed after), with the parent told where the transaction stands, so it stops
        renewing a job that is done and saves the result the child then returns."""
        if self.lost:
            raise LeaseLost(self._lease.job_id, self._lease.execution_id)
        self._send(("transaction", TransactionState.OPEN.value, False))
        store = open_store(self._url)
        self._open = True
        try:
            with store.completing(self._lease, self._last_report, lambda: self._handed) as conn:
                yield conn
        except BaseException:
            self._handed = None
            self._send(("transaction", TransactionState.NONE.value, False))
            raise
        finally:
            self._open = False
            store.link.close()
        self._send(("transaction", TransactionState.COMMITTED.value, self._handed is not None))

    def commit_result(self, value: Any) -> None:
        if not self._open:
            raise RuntimeError(
                "ctx.commit_result() hands a result to the commit of ctx.transaction(): "
                "call it inside the block"
            )
        self._handed = payload.encode(value, what="result", limit=self._limit)

    def _last_report(self) -> Report | None:
        return None if self._report.empty else self._report

    def runs(self, job_id: str, execution_id: int) -> bool:
        """Whether this is the attempt of that job and execution (flags name theirs)."""
        return (job_id, execution_id) == (self._lease.job_id, self._lease.execution_id)

    def answer(self, text: str) -> None:
        """The parent's answer to this attempt's checkpoint."""
        with self._reply:
            self._answer = text
            self._reply.notify_all()


def resolve_task(app_ref: str, task_name: str) -> Any:
    module_name, _, attr = app_ref.partition(":")
    module = importlib.import_module(module_name)
    app = getattr(module, attr or "app")
    return app.tasks.get(task_name)


def rss_bytes() -> int | None:
    """This process's resident memory now, in bytes: Linux's `/proc/self/statm`, else
    the peak the kernel reports (`ru_maxrss`, which only grows), else None."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    try:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    except (OSError, ValueError):
        return None
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


class Child:
    """One child: its pipe, the attempt it runs now (`control`), and the jobs its parent
    sends, which its listener thread hands to the main thread (`jobs`; None: exit)."""

    def __init__(self, conn: Connection, app_ref: str, limit: int) -> None:
        self.conn = conn
        self.app_ref = app_ref
        self.limit = limit
        self.send_lock = threading.Lock()
        self.jobs: queue.SimpleQueue[tuple[dict[str, Any], bool] | None] = queue.SimpleQueue()
        self.control: ChildControl | None = None
        self._flags_lock = threading.Lock()
        self._early: dict[tuple[str, int], tuple[bool, bool]] = {}
        """Flags that came for an attempt before it started here (its parent tells a
        child of a cancel or a lost lease as soon as it sent the job)."""
        self.running = False
        """An attempt runs and has not reported: a pipe that closes now means the parent
        is gone before it heard the end, so the child exits at once (`listen`)."""
        self.instrumented = False

    def listen(self) -> None:
        """Runs in a thread: apply the parent's messages; exit if the parent is gone."""
        try:
            while True:
                message = self.conn.recv()
                kind, control = message[0], self.control
                if kind == "job":
                    self.jobs.put((message[1], bool(message[2])))
                elif kind == "exit":
                    self.jobs.put(None)
                elif kind == "flags":
                    self._flags(message[1], message[2], bool(message[3]), bool(message[4]))
                elif kind == "checkpoint" and control is not None:
                    control.answer(message[1])
        except (EOFError, OSError, TypeError):  # TypeError: the pipe closed under recv
            if self.running:  # the parent is gone before the attempt's end reached it
                os._exit(70)
            self.jobs.put(None)  # idle, or the last end sent: nothing to say (it once
            # printed a traceback)

    def _flags(self, job_id: str, execution_id: int, lost: bool, cancel: bool) -> None:
        with self._flags_lock:
            control = self.control
            if control is not None and control.runs(job_id, execution_id):
                control.lost, control.cancel_requested = lost, cancel
            else:  # its attempt is to come (one long gone is never asked for)
                self._early = {(job_id, execution_id): (lost, cancel)}

    def run(self, job: dict[str, Any]) -> AttemptEnd:
        """One attempt of the job its parent sent."""
        ref: AttemptRef = job["ref"]
        control = ChildControl(self.conn, self.limit, ref.lease, job["url"], self.send_lock)
        with self._flags_lock:
            self.control = control  # fenced on its worker too
            early = self._early.pop((ref.job_id, ref.execution_id), None)
            if early is not None:
                control.lost, control.cancel_requested = early
        try:
            task = resolve_task(self.app_ref, ref.task)
        except Exception as exc:  # noqa: BLE001 - an import error is the attempt's outcome
            return AttemptEnd(Outcome.FAILED, error=f"cannot import {self.app_ref}: {exc!r}")
        if task is None:
            return unknown_task_end(ref.task)
        if job["otel"] and not self.instrumented:
            tracing.instrument(task.app)  # its parent did: the same imports work here
            self.instrumented = True
        ctx = JobContext(
            ref,
            checkpoint=job["checkpoint"],
            control=control,
            max_retries=job["max_retries"],
            meta=job["meta"],
            snoozes=job["snoozes"][0],
            max_snoozes=job["snoozes"][1],
        )
        attempt = Attempt(ref.attempt, job["max_retries"])
        with self.send_lock:  # its parent's deadline counts from here
            self.conn.send(("began", time.monotonic()))
        end = run_sync(task, ctx, control, job["args"], self.limit, attempt)
        return dataclasses.replace(end, ended_at=time.monotonic())

    def report(self, end: AttemptEnd) -> None:
        """Send the attempt's end, and the child's memory after it, to the parent."""
        why = None if end.cannot_run is None else end.cannot_run.value
        message = (
            "done", end.outcome.value, end.result_json, end.error, end.permanent, why,
            end.database_away, end.snooze_for, end.retry_delay, end.retry_delay_error,
            end.ended_at, rss_bytes(),
        )  # fmt: skip
        with self.send_lock:
            self.conn.send(message)
        self.running = False
        self.control = None


def child_main(conn: Connection, app_ref: str, limit: int) -> None:
    """A child's life: the attempts its parent sends, each reported, until the one its
    parent said is its last, or its parent tells it to exit."""
    _die_with_parent()
    events.keep_last_resort()  # a task that closes stderr must not break a library's log
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = Child(conn, app_ref, limit)
    threading.Thread(target=child.listen, daemon=True).start()
    while (sent := child.jobs.get()) is not None:
        job, last = sent
        child.running = True
        child.report(child.run(job))
        if last:
            break
    conn.close()
