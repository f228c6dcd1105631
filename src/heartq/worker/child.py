"""The child side of the process pool: runs one attempt, talks to its parent over a pipe.

Messages, child to parent: `("touch", progress | None)`, `("checkpoint", json)` (answered
by `("checkpoint", "ok" | "lost" | error text)`), `("transaction", state, with_result)`
(where its `ctx.transaction()` stands; committed with the result the task handed to the
commit, or not), `("done", AttemptEnd fields)` (with the wait its task's `retry_delay`
gave: the exception it was asked about exists only here).
Parent to child: `("flags", lost, cancel_requested)`. The child dies with its parent: it
asks the kernel for SIGKILL when the parent goes (Linux), and exits when the pipe closes.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import importlib
import os
import signal
import sys
import threading
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

    def __init__(self, conn: Connection, limit: int, lease: Lease, url: str) -> None:
        self._conn = conn
        self._limit = limit
        self._lease = lease
        self._url = url
        self._send_lock = threading.Lock()
        self._reply = threading.Condition()
        self._answer: str | None = None
        self.lost = False
        self.cancel_requested = False
        self.reported = False
        """The attempt's end was sent and the pipe closed by `child_main`: a listener
        that then finds the pipe closed has nothing to say (it once printed a traceback)."""
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
        self._send(("touch", fields))

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

    def listen(self) -> None:
        """Runs in a thread: apply the parent's messages; exit if the parent is gone."""
        try:
            while True:
                message = self._conn.recv()
                if message[0] == "flags":
                    self.lost, self.cancel_requested = bool(message[1]), bool(message[2])
                elif message[0] == "checkpoint":
                    with self._reply:
                        self._answer = message[1]
                        self._reply.notify_all()
        except (EOFError, OSError, TypeError):  # TypeError: the pipe closed under recv
            if not self.reported:  # the parent is gone before the attempt's end reached it
                os._exit(70)


def resolve_task(app_ref: str, task_name: str) -> Any:
    module_name, _, attr = app_ref.partition(":")
    module = importlib.import_module(module_name)
    app = getattr(module, attr or "app")
    return app.tasks.get(task_name)


def child_main(conn: Connection, app_ref: str, job: dict[str, Any], limit: int) -> None:
    _die_with_parent()
    events.keep_last_resort()  # a task that closes stderr must not break a library's log
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ref: AttemptRef = job["ref"]
    control = ChildControl(conn, limit, ref.lease, job["url"])  # fenced on its worker too
    threading.Thread(target=control.listen, daemon=True).start()
    try:
        task = resolve_task(app_ref, ref.task)
    except Exception as exc:  # noqa: BLE001 - an import error is the attempt's outcome
        end = AttemptEnd(Outcome.FAILED, error=f"cannot import {app_ref}: {exc!r}")
    else:
        if task is not None and job["otel"]:
            tracing.instrument(task.app)  # its parent did: the same imports work here
        if task is None:
            end = unknown_task_end(ref.task)
        else:
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
            end = run_sync(task, ctx, control, job["args"], limit, attempt)
    why = None if end.cannot_run is None else end.cannot_run.value
    control._send(
        ("done", end.outcome.value, end.result_json, end.error, end.permanent, why,
         end.database_away, end.snooze_for, end.retry_delay, end.retry_delay_error)
    )  # fmt: skip
    control.reported = True
    conn.close()
