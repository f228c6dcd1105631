"""The process pool: each attempt in its own child process, watched by its parent.

Children are started from a `forkserver` (fast, and they do not inherit the worker's
liveness lock, so a child outliving its parent cannot keep a gone worker looking alive).
The parent heartbeats for its children: they only send progress and checkpoints up the
pipe. When a child dies without reporting (SIGKILL, OOM kill, segfault, `os._exit`), the
parent closes its execution as `crashed` at once, with the exit code or signal.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import sys
import threading
from collections.abc import Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

from heartq.app import App
from heartq.errors import LeaseLost, PayloadError
from heartq.lifecycle.fate import AttemptEnd, CannotRun
from heartq.model import Lease, Outcome, Progress
from heartq.worker import tracing
from heartq.worker.attempt import RunningJob, TransactionState
from heartq.worker.child import child_main
from heartq.worker.invoke import call_args
from heartq.worker.ledger import Ledger

KILL_WAIT = 5.0
"""seconds to wait for a killed child to be collected."""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def locate_app(app: App) -> str:
    """`module:attribute` under which `app` can be imported (the process pool needs it)."""
    modules = {task.fn.__module__ for task in app.tasks.values()}
    for module_name in sorted(modules):
        module = sys.modules.get(module_name)
        for attr, value in vars(module).items() if module else ():
            if value is app:
                if module_name == "__main__":
                    raise ValueError(
                        "the process pool cannot import an app defined in __main__: move it "
                        "into a module and run `heartq worker module:app`"
                    )
                return f"{module_name}:{attr}"
    raise ValueError("cannot tell which module defines this app; pass app_ref='module:attr'")


class ProcessPool:
    def __init__(
        self, ledger: Ledger, app_ref: str, max_payload_bytes: int, url: str, *, otel: bool = False
    ) -> None:
        self._ledger = ledger
        self._otel = otel  # each child instruments its app too (heartq.worker.tracing)
        self._url = url
        self._worker_id = ledger.worker_id
        self._app_ref = app_ref
        self._limit = max_payload_bytes
        method = (
            "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
        )
        self._mp: Any = multiprocessing.get_context(method)
        if method == "forkserver":
            module = app_ref.partition(":")[0]
            # The store's backend too: a child opens a store of its own for
            # ctx.transaction(), and importing psycopg there cost 0.3-0.5 s per attempt.
            backend = "postgres" if url.split(":", 1)[0].startswith("postgres") else "sqlite"
            store = f"heartq.store.{backend}.store"
            preload = ["heartq.worker.child", store, module]
            self._mp.set_forkserver_preload([*preload, tracing.OTEL_MODULE] if otel else preload)
        # by lease, not job id: a worker may hold a lost attempt and a newer one of a job
        self._children: dict[Lease, tuple[Any, Connection]] = {}
        self._lock = threading.Lock()

    def start(self, runs: Sequence[RunningJob]) -> None:
        for run in runs:
            if run.job.dependency_results:  # its results are read first: not in this loop
                name = f"heartq-results-{run.job.id}"
                threading.Thread(
                    target=self._start_child, args=(run,), name=name, daemon=True
                ).start()
            else:
                self._start_child(run)

    def _start_child(self, run: RunningJob) -> None:
        job = run.job
        args = call_args(run)
        if isinstance(args, AttemptEnd):
            self._ledger.attempt_ended(run, args)
            return
        fields = {
            "ref": job.ref_for(self._worker_id),
            "args": args,
            "checkpoint": job.checkpoint,
            "max_retries": job.max_retries,
            "snoozes": (job.snoozes, job.max_snoozes),
            "meta": dict(job.meta),
            "url": self._url,  # a child opens the store only for ctx.transaction()
            "otel": self._otel,
        }
        parent_conn, child_conn = self._mp.Pipe()
        process = self._mp.Process(
            target=child_main,
            args=(child_conn, self._app_ref, fields, self._limit),
            name=f"heartq-child-{job.id}",
            daemon=True,
        )
        process.start()
        child_conn.close()
        with self._lock:
            self._children[job.lease] = (process, parent_conn)
        # Starting a child takes a while (longer on a loaded machine, and a claim's batch
        # starts one child after another), and a stop or a flag that came meanwhile found
        # no child: kill it or tell it now. The worker records an end, and sets the flags,
        # before it stops the code, so either that stop found the child or this sees them.
        if run.ended is not None:
            self.stop(run)
        elif run.cancel_requested or run.lost:
            self.notify(run)
        threading.Thread(
            target=self._watch,
            args=(run, process, parent_conn),
            name=f"heartq-watch-{job.id}",
            daemon=True,
        ).start()

    def _watch(self, run: RunningJob, process: Any, conn: Connection) -> None:
        end: AttemptEnd | None = None
        try:
            while end is None:
                ready = wait([conn, process.sentinel], timeout=1.0)
                if conn in ready:
                    try:
                        end = self._handle(run, conn, conn.recv())
                    except (EOFError, OSError):
                        pass
                    else:
                        continue
                if process.sentinel in ready or not process.is_alive():
                    while end is None and conn.poll():  # drain what it sent before dying
                        try:
                            end = self._handle(run, conn, conn.recv())
                        except (EOFError, OSError):
                            break
                    if end is None:
                        process.join(KILL_WAIT)
                        end = self._crash_end(process)
        finally:
            process.join(KILL_WAIT)
            if process.is_alive():  # it reported, but what its task left (a non-daemon
                with contextlib.suppress(Exception):  # thread) holds its exit: it goes
                    process.kill()
                process.join(KILL_WAIT)
            with self._lock:
                self._children.pop(run.job.lease, None)
            conn.close()
        self._ledger.attempt_ended(run, end)

    def _handle(self, run: RunningJob, conn: Connection, message: Any) -> AttemptEnd | None:
        kind = message[0]
        if kind == "touch":
            run.touch(None if message[1] is None else Progress(*message[1]))
        elif kind == "checkpoint":
            try:
                run.save_checkpoint_json(message[1])
                answer = "ok"
            except LeaseLost:
                answer = "lost"
            except (PayloadError, Exception) as exc:  # noqa: BLE001 - reported to the task
                answer = f"checkpoint not saved: {exc}"
            with self._lock, contextlib.suppress(OSError):
                conn.send(("checkpoint", answer))
        elif kind == "transaction":  # its ctx.transaction() opened, failed or committed
            state = TransactionState(message[1])
            if state is TransactionState.COMMITTED:  # with the result handed to it, or not
                run.mark_committed(bool(message[2]))
            else:
                run.transaction = state
        elif kind == "done":
            _, outcome, result_json, error, permanent, cannot_run, away, snooze_for, delay, why_not = (
                message
            )
            why = None if cannot_run is None else CannotRun(cannot_run)
            return AttemptEnd(
                Outcome(outcome), result_json, error, permanent, cannot_run=why,
                snooze_for=snooze_for, retry_delay=delay, retry_delay_error=why_not,
                database_away=away,
            )  # fmt: skip
        return None

    def _crash_end(self, process: Any) -> AttemptEnd:
        code = process.exitcode
        crash: dict[str, Any] = {"pid": process.pid, "exit_code": code, "signal": None}
        if code is not None and code < 0:
            crash["signal"] = _signal_name(-code)
            crash["reason"] = f"child process killed by {crash['signal']}"
        else:
            crash["reason"] = f"child process exited with code {code} before reporting"
        return AttemptEnd(Outcome.CRASHED, error=crash["reason"], crash=crash)

    def stop(self, run: RunningJob) -> None:
        with self._lock:
            child = self._children.get(run.job.lease)
        if child is not None:
            with contextlib.suppress(Exception):
                child[0].kill()

    def notify(self, run: RunningJob) -> None:
        with self._lock:
            child = self._children.get(run.job.lease)
            if child is not None:
                with contextlib.suppress(OSError):
                    child[1].send(("flags", run.lost, run.cancel_requested))

    def close(self) -> None:
        with self._lock:
            children = list(self._children.values())
        for process, _ in children:
            with contextlib.suppress(Exception):
                process.kill()
