"""The process pool: each attempt in a child process, watched by its parent.

Children are started from a `forkserver` (fast, and they do not inherit the worker's
liveness lock, so a child outliving its parent cannot keep a gone worker looking alive).
The parent heartbeats for its children: they only send progress and checkpoints up the
pipe. When a child dies without reporting (SIGKILL, OOM kill, segfault, `os._exit`), the
parent closes its execution as `crashed` at once, with the exit code or signal.

A child runs one attempt and exits (`ChildLimits.jobs` 1, the default: nothing a task leaves
behind, a leak, a global, a thread, reaches the next). A worker may reuse its children
instead (Celery's `max_tasks_per_child`, `max_memory_per_child`): a child that reported
its attempt waits, idle, for the next one, until it has run `ChildLimits.jobs`
attempts (told with its last one, it exits once it reported it) or its resident memory
after an attempt passes `ChildLimits.memory` bytes (told to exit then). Either way the
attempt it just ran was reported first, and handed to the worker like any other; the next attempt
takes an idle child, or starts a new one. A child that was stopped (a timeout, a
cancel) is killed, never reused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import multiprocessing
import signal
import sys
import threading
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

from heartq import events
from heartq.app import App
from heartq.errors import LeaseLost, PayloadError
from heartq.lifecycle.fate import AttemptEnd, CannotRun
from heartq.model import Lease, Outcome, Progress
from heartq.worker import tracing
from heartq.worker.attempt import SETTLED, RunningJob, TransactionState
from heartq.worker.child import child_main
from heartq.worker.invoke import call_args
from heartq.worker.ledger import Ledger
from heartq.worker.pools import ChildLimits

KILL_WAIT = 5.0
"""seconds to wait for a killed child to be collected."""
CHILD_START = 30.0
"""Seconds a child may take to begin an attempt's code (started from the forkserver,
the app imported), beyond the task's `timeout` or `heartbeat_timeout`, before the attempt
is ended `timed_out` anyway: each counts from when the code began."""
WATCH_WAIT = 1.0
"""Seconds at most between two looks of a watching thread at its child."""
WATCH_WAIT_MIN = 0.005
"""...and at least, so that a deadline just past cannot spin the thread."""


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


ONE_PER_ATTEMPT = ChildLimits()
"""The default: a child per attempt."""


@dataclasses.dataclass
class Child:
    """A child process of the pool and the parent's end of its pipe; `jobs`: the
    attempts sent to it so far."""

    process: Any
    conn: Connection
    jobs: int = 0


@dataclasses.dataclass(frozen=True)
class Done:
    """How a child's attempt ended, as it reported it, and its resident memory then."""

    end: AttemptEnd
    rss: int | None


class ProcessPool:
    """Runs each attempt in a child process; ends its attempts' timeouts itself
    (`ends_timeouts`): the child says when its code began (the deadline counts from
    then) and when it ended (the end is judged at that time), so a parent held up,
    SIGSTOPped or starved, by the time it reads a report does not time out code that
    ended in time; and only the thread watching a child decides that it overran, after
    it read all the child sent."""

    ends_timeouts = True

    def __init__(
        self,
        ledger: Ledger,
        app_ref: str,
        max_payload_bytes: int,
        url: str,
        *,
        otel: bool = False,
        limits: ChildLimits = ONE_PER_ATTEMPT,
    ) -> None:
        self._ledger = ledger
        self._otel = otel  # each child instruments its app too (heartq.worker.tracing)
        self._url = url
        self._worker_id = ledger.worker_id
        self._app_ref = app_ref
        self._limit = max_payload_bytes
        self._limits = limits
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
        self._children: dict[Lease, Child] = {}
        self._idle: list[Child] = []
        """Children that reported their attempt and wait for another (reuse only)."""
        self._closed = False
        self._lock = threading.Lock()

    @property
    def reuses(self) -> bool:
        """Whether a child may run more than one attempt."""
        return self._limits.jobs != 1

    def _last(self, child: Child) -> bool:
        """Whether the attempt just sent to `child` is its last by count."""
        return 0 < self._limits.jobs <= child.jobs

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
        run.allow_start(CHILD_START)
        child = self._send(job.id, fields)
        with self._lock:
            self._children[job.lease] = child
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
            args=(run, child),
            name=f"heartq-watch-{job.id}",
            daemon=True,
        ).start()

    def _send(self, job_id: str, fields: dict[str, Any]) -> Child:
        """The child that runs this attempt, the job sent to it: an idle one, else a new
        one. An idle child found dead, or whose pipe is gone, is let go for another."""
        while (child := self._take_idle()) is not None:
            child.jobs += 1
            try:
                child.conn.send(("job", fields, self._last(child)))
            except (OSError, ValueError):
                self._retire(child, kill=True)
                continue
            return child
        parent_conn, child_conn = self._mp.Pipe()
        process = self._mp.Process(
            target=child_main,
            args=(child_conn, self._app_ref, self._limit),
            name=f"heartq-child-{job_id}",
            daemon=True,
        )
        process.start()
        child_conn.close()
        child = Child(process, parent_conn, jobs=1)
        # cannot fail for a new child: the pipe's buffer holds it until the child reads
        parent_conn.send(("job", fields, self._last(child)))
        return child

    def _take_idle(self) -> Child | None:
        """An idle child still alive (one that died idle is collected), or None."""
        while True:
            with self._lock:
                if not self._idle:
                    return None
                child = self._idle.pop()
            if child.process.is_alive():
                return child
            self._retire(child, kill=True)

    def _watch(self, run: RunningJob, child: Child) -> None:
        """Until the attempt ends: then the child waits for another, or goes, before
        the end is handed to the worker (which frees the slot: a slot's child is never
        two processes at once)."""
        done = self._wait_done(run, child)
        with self._lock:
            self._children.pop(run.job.lease, None)
        if done is None:  # it died (or was killed) before it reported
            self._retire(child, kill=True)
            self._ledger.attempt_ended(run, self._crash_end(child.process))
            return
        why_not = self._why_not_again(child, done)
        if why_not is not None or not self._keep(child):
            if why_not is not None and self.reuses:
                self._ledger.events.emit(
                    events.CHILD_RECYCLED,
                    logging.INFO,
                    worker_id=self._worker_id,
                    pid=child.process.pid,
                    jobs=child.jobs,
                    rss=done.rss,
                    reason=why_not,
                )
            self._retire(child, kill=False)
        self._ledger.attempt_ended(run, done.end)

    def _wait_done(self, run: RunningJob, child: Child) -> Done | None:
        """What the child reported of this attempt, or None if it died first."""
        process, conn = child.process, child.conn
        while True:
            ready = wait([conn, process.sentinel], timeout=self._watch_wait(run))
            if conn in ready:
                try:
                    done = self._handle(run, conn, conn.recv())
                except (EOFError, OSError):
                    pass
                else:
                    if done is not None:
                        return done
                    self._end_if_overdue(run, conn)
                    continue
            if not ready:
                self._end_if_overdue(run, conn)
                continue
            if process.sentinel in ready or not process.is_alive():
                while conn.poll():  # drain what it sent before dying
                    try:
                        done = self._handle(run, conn, conn.recv())
                    except (EOFError, OSError):
                        break
                    if done is not None:
                        return done
                process.join(KILL_WAIT)
                return None

    @staticmethod
    def _watch_wait(run: RunningJob) -> float:
        """How long to wait for the child before looking at the attempt's deadline and
        its silence's."""
        moments = [m for m in (run.deadline, run.silent_at) if m is not None]
        if not moments or run.ended is not None:
            return WATCH_WAIT
        return min(WATCH_WAIT, max(WATCH_WAIT_MIN, min(moments) - time.monotonic()))

    def _end_if_overdue(self, run: RunningJob, conn: Connection) -> None:
        """End the attempt `timed_out` (its child is killed) if it passed its deadline,
        or went silent past its `heartbeat_timeout`, with nothing more from its child to
        read: what waits in the pipe is read first (a report says whether the code ended
        in time, a heartbeat when the task last beat). A child that beat past its
        deadline is late whatever it sent after (a task beating faster than its parent
        reads never leaves the pipe empty). A transaction that commits or committed
        decides instead (`SETTLED`), as the supervisor leaves it to."""
        if run.ended is not None or run.transaction in SETTLED:
            return
        now = time.monotonic()
        late = run.deadline is not None and now >= run.deadline
        # Before its code began, its silence waits as its deadline does (`allow_start`).
        silent = run.is_silent(now if run.began is not None else now - CHILD_START)
        if not (late or silent):
            return
        beat_late = late and run.deadline is not None and run.last_touch >= run.deadline
        if conn.poll() and not beat_late:
            return
        if run.began is None:
            end = AttemptEnd(
                Outcome.TIMED_OUT,
                error=f"timed out: its child process had not begun the task's code "
                f"{CHILD_START:g} s past its timeout",
            )
        else:
            end = run.timed_out_end() if late else run.silent_end()
        self._ledger.force(run, end)

    def _why_not_again(self, child: Child, done: Done) -> str | None:
        """Why the child runs no other attempt, or None: it may."""
        if self._last(child):
            return "max_jobs_per_child"
        ceiling = self._limits.memory
        if ceiling is not None and done.rss is not None and done.rss > ceiling:
            return "max_memory_per_child"
        return None

    def _keep(self, child: Child) -> bool:
        """Put a child that may run another attempt with the idle ones (False: the pool
        is closing)."""
        with self._lock:
            if self._closed:
                return False
            self._idle.append(child)
            return True

    def _retire(self, child: Child, *, kill: bool) -> None:
        """Let a child go: told to exit (it has reported; told already if that was its
        last), then collected; killed if it does not exit (a task left a non-daemon
        thread that holds its exit), or at once (`kill`)."""
        process = child.process
        if kill:
            with contextlib.suppress(Exception):
                process.kill()
        else:
            with contextlib.suppress(OSError, ValueError):
                child.conn.send(("exit",))
        process.join(KILL_WAIT)
        if process.is_alive():
            with contextlib.suppress(Exception):
                process.kill()
            process.join(KILL_WAIT)
        child.conn.close()

    def _handle(self, run: RunningJob, conn: Connection, message: Any) -> Done | None:
        kind = message[0]
        if kind == "touch":
            run.touch(None if message[1] is None else Progress(*message[1]), at=message[2])
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
        elif kind == "began":  # its code begins: the timeout counts from here
            run.code_began(message[1])
        elif kind == "transaction":  # its ctx.transaction() opened, failed or committed
            state = TransactionState(message[1])
            if state is TransactionState.COMMITTED:  # with the result handed to it, or not
                run.mark_committed(bool(message[2]))
            else:
                run.transaction = state
        elif kind == "done":
            (
                _,
                outcome,
                result_json,
                error,
                permanent,
                cannot_run,
                away,
                snooze_for,
                delay,
                why_not,
                ended_at,
                rss,
            ) = message
            why = None if cannot_run is None else CannotRun(cannot_run)
            end = AttemptEnd(
                Outcome(outcome), result_json, error, permanent, cannot_run=why,
                snooze_for=snooze_for, retry_delay=delay, retry_delay_error=why_not,
                database_away=away, ended_at=ended_at,
            )  # fmt: skip
            return Done(end, rss)
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
                child.process.kill()

    def notify(self, run: RunningJob) -> None:
        lease = run.job.lease
        with self._lock:
            child = self._children.get(lease)
            if child is not None:
                with contextlib.suppress(OSError):
                    flags = (lease.job_id, lease.execution_id, run.lost, run.cancel_requested)
                    child.conn.send(("flags", *flags))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            children = [*self._children.values(), *self._idle]
            self._idle.clear()
        for child in children:
            with contextlib.suppress(Exception):
                child.process.kill()
