"""Execution pools: where an attempt's code runs.

- `thread` (default): each attempt in its own thread. Cancels are cooperative
  (`ctx.cancelled`, `heartq.Cancelled` from `ctx.heartbeat()`); Python cannot kill a
  thread, so a timed-out, force-cancelled or fenced-out thread is abandoned: its outcome
  is decided by the worker at once and whatever the thread does later is ignored, but it
  keeps its slot until it returns (`Ledger.abandoned`), so the worker never runs more
  task code at once than its concurrency.
- `async`: one event loop thread runs every attempt as an asyncio task; a cancel, a
  timeout or a lost lease cancels the task, whose slot frees once the coroutine finishes.
- `process`: each attempt in a child process (see `process_pool`; children may be
  reused, `ChildLimits`); a stop kills it, and its slot frees once the child is gone.

Every pool reports each attempt's end exactly once, when its code really ended
(`Ledger.attempt_ended`).

Heartbeats never run on a pool: a CPU-bound thread or a blocking coroutine cannot starve
them.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import math
import threading
import time
from collections.abc import Sequence
from typing import Any

from heartq import payload
from heartq.context import JobContext
from heartq.errors import ConfigError
from heartq.event_stream import EventStream
from heartq.events import MAINTENANCE_FAILED
from heartq.lifecycle.fate import AttemptEnd, unknown_task_end
from heartq.model import Lease, Outcome
from heartq.worker.attempt import RunningJob
from heartq.worker.invoke import (
    Attempt,
    call_args,
    describe,
    end_from_exception,
    needs_context,
    run_async,
    run_sync,
)
from heartq.worker.ledger import Ledger
from heartq.worker.loop_watch import LoopWatch

POOL_NAMES = ("thread", "process", "async")
LONG_ATTEMPT = 0.1
"""An attempt that runs this long (seconds) outlasts the wake-up of a thread by far, even
on a busy machine: its task's next attempts each get a thread called at once
(`ThreadPool`)."""


MIB = 1 << 20


@dataclasses.dataclass(frozen=True)
class ChildLimits:
    """When a process-pool child exits (Celery's `max_tasks_per_child`,
    `max_memory_per_child`): after `jobs` attempts (0: no limit; 1, the default: a child
    per attempt), or once its resident memory after an attempt passes `memory` bytes
    (None: no ceiling). A child is reused only when `jobs` is not 1."""

    jobs: int = 1
    memory: int | None = None

    @classmethod
    def of(cls, pool: str, jobs: int | None, memory_mib: float | None) -> ChildLimits:
        """From a worker's `max_jobs_per_child` (None: 1, or no limit with a memory
        ceiling) and `max_memory_per_child` (MiB); `ConfigError` in one line for a bad
        value, or for either with a pool other than `process`."""
        if jobs is not None:
            payload.check_int("max_jobs_per_child", jobs, minimum=0)
        if memory_mib is not None and (
            not isinstance(memory_mib, int | float)
            or isinstance(memory_mib, bool)
            or not math.isfinite(memory_mib)
            or memory_mib <= 0
        ):
            raise ConfigError(
                f"max_memory_per_child must be a positive number of megabytes (MiB), "
                f"got {memory_mib!r}"
            )
        if pool != "process" and (jobs is not None or memory_mib is not None):
            given = "max_jobs_per_child" if jobs is not None else "max_memory_per_child"
            raise ConfigError(
                f"{given} recycles process-pool children: it needs pool='process' "
                f"(--pool process), got pool={pool!r}"
            )
        if jobs is None:
            jobs = 1 if memory_mib is None else 0
        return cls(jobs, None if memory_mib is None else int(memory_mib * MIB))


def make_context(run: RunningJob, worker_id: str) -> JobContext:
    job = run.job
    return JobContext(
        job.ref_for(worker_id),
        checkpoint=job.checkpoint,
        control=run,
        max_retries=job.max_retries,
        meta=job.meta,
        snoozes=job.snoozes,
        max_snoozes=job.max_snoozes,
    )


def guarded_end(run: RunningJob, exc: BaseException, events: EventStream) -> AttemptEnd:
    """The end of an attempt whose run raised past `run_sync`/`run_async`, which make all
    the task's own code raises its outcome: what raised here is heartq's (or a hook's),
    so it is told to the worker's `events` as an error, and the attempt fails like any
    exception."""
    events.emit(
        MAINTENANCE_FAILED,
        logging.ERROR,
        service="pool",
        worker_id=run.job.worker_id,
        job_id=run.job.id,
        error=describe(exc),
    )
    return end_from_exception(exc, run.cancel_requested)


class ThreadPool:
    """Long-lived threads, reused across attempts, each attempt's code on a thread of its
    own. Attempts wait in a queue for a thread, and threads are called to it one at a
    time: a thread that takes an attempt while others still wait calls the next one
    (an idle thread, or a new one when none is idle) before it runs its own. So every
    attempt gets a thread of its own at once, whatever the ones before it do (a hung,
    abandoned attempt never holds up the next one), and yet a batch of short attempts is
    run by the few threads that reach the queue while it lasts, not by a wake-up of a
    thread per attempt (each a system call and a handover of the GIL: 5 us of a no-op
    job's 70, one worker on PostgreSQL).

    Attempts of a task whose last attempt here ran `LONG_ATTEMPT` or more each get a
    thread called at once instead: each needs a thread of its own anyway, and on a busy
    machine each wake-up of a chain waits for a core before it calls the next. 40
    workers x 25 on 2 cores drained 1-second jobs at 0.76 of the ideal rate by the chain
    (median of 5 runs, 0.68-0.81) and 0.82 with a thread called for each (median of 3,
    0.81-0.82; BENCHMARKS.md, "A thousand slots"). Long is 100 ms: at 1 ms, no-op
    attempts preempted on that busy machine counted as long, and the wake-ups they
    then cost took the fleet's no-op jobs from about 6,100 to 4,400 a second."""

    ends_timeouts = False  # the supervisor does (`ExecutionPool.ends_timeouts`)

    def __init__(self, ledger: Ledger, max_payload_bytes: int) -> None:
        self._ledger = ledger
        self._worker_id = ledger.worker_id
        self.events = ledger.events
        self._limit = max_payload_bytes
        self._lock = threading.Lock()
        self._queued: collections.deque[RunningJob] = collections.deque()
        self._idle: list[threading.Lock] = []
        """Each idle thread's parking lock, held: released to call that thread."""
        self._calling = 0
        """Threads called to the queue that have not reached it yet: more than one only
        for the attempts of long tasks."""
        self._long: set[str] = set()
        """Tasks whose last attempt here ran `LONG_ATTEMPT` or more."""
        self._closing = False
        self._threads: list[threading.Thread] = []

    def start(self, runs: Sequence[RunningJob]) -> None:
        with self._lock:
            self._queued.extend(runs)
            for _ in range(sum(run.job.task in self._long for run in runs) - self._calling):
                self._call()
            self._call_next()

    def _call_next(self) -> None:
        """Under the lock: call a thread to the queue if attempts wait in it and none is
        on its way already (whoever takes an attempt calls the next)."""
        if not self._calling and self._queued:
            self._call()

    def _call(self) -> None:
        """Under the lock: call an idle thread to the queue, or a new one."""
        self._calling += 1
        if self._idle:
            self._idle.pop().release()
            return
        thread = threading.Thread(
            target=self._serve, name=f"heartq-job-{len(self._threads)}", daemon=True
        )
        self._threads.append(thread)
        thread.start()

    def _serve(self) -> None:
        park = threading.Lock()
        park.acquire()
        called = True  # started by `_call`
        while True:
            with self._lock:
                if called:
                    self._calling -= 1
                    called = False
                run = self._queued.popleft() if self._queued else None
                if run is not None:
                    self._call_next()  # attempts still wait: the next thread, first
                elif self._closing:
                    return
                else:
                    self._idle.append(park)
            if run is None:
                park.acquire()  # until `_call` or `close` releases it
                called = True
                continue
            try:
                self._run(run)
            except BaseException as exc:  # noqa: BLE001 - nothing may end a pool's thread
                # `run_sync` makes whatever the task raises its outcome; this is the
                # guard behind it (a hook, a dependency's results): the attempt still
                # ends, and its slot comes back (a second end of it is ignored).
                self._ledger.attempt_ended(run, guarded_end(run, exc, self.events))

    def _run(self, run: RunningJob) -> None:
        if run.ended is not None:  # decided before a thread took it: its code never starts
            self._ledger.attempt_ended(run, run.ended)
            return
        args = call_args(run)
        if run.task is None:
            end = unknown_task_end(run.job.task)
        elif isinstance(args, AttemptEnd):
            end = args
        else:
            ctx = make_context(run, self._worker_id) if needs_context(run.task) else None
            began = time.monotonic()
            attempt = Attempt(run.job.attempt, run.job.max_retries)
            end = run_sync(run.task, ctx, run, args, self._limit, attempt)
            if time.monotonic() - began >= LONG_ATTEMPT:
                self._long.add(run.job.task)
            else:
                self._long.discard(run.job.task)
        self._ledger.attempt_ended(run, end)

    def stop(self, run: RunningJob) -> None:
        """Nothing stops a thread: its ctx reports cancelled, its outcome is ignored, and
        it holds its slot until it returns."""

    def notify(self, run: RunningJob) -> None:
        """The thread reads the flags through its ctx."""

    def close(self) -> None:
        """Idle threads end now, busy ones once the queue is empty."""
        with self._lock:
            self._closing = True
            while self._idle:
                self._idle.pop().release()


class AsyncPool:
    """One event loop thread runs every attempt as an asyncio task."""

    ends_timeouts = False  # the supervisor does (`ExecutionPool.ends_timeouts`)

    def __init__(self, ledger: Ledger, max_payload_bytes: int) -> None:
        self._ledger = ledger
        self._worker_id = ledger.worker_id
        self.events = ledger.events
        self._limit = max_payload_bytes
        self._loop = asyncio.new_event_loop()
        # by lease, not job id: a worker may hold a lost attempt and a newer one of a job
        self._tasks: dict[Lease, tuple[asyncio.Task[None], RunningJob]] = {}
        self._closing = False
        self._loop.set_exception_handler(self._unhandled)
        self._thread = threading.Thread(target=self._serve, name="heartq-async-pool", daemon=True)
        self._thread.start()
        self._watch = LoopWatch(self._loop, self._run_of, self._worker_id, self.events)
        self._watch.start()

    def _serve(self) -> None:
        """Run the loop until `close()`. An attempt's own exceptions are its outcome
        (`run_async`), but code a task left behind on the loop (a task it created and never
        awaited, a callback) can still raise `KeyboardInterrupt` or `SystemExit`, which
        asyncio lets out of `run_forever`: the loop is run again, so the pool's other
        attempts go on."""
        while not self._closing:
            try:
                self._loop.run_forever()
            except BaseException as exc:  # noqa: BLE001 - nothing may end the pool's loop
                self.events.emit(
                    MAINTENANCE_FAILED,
                    logging.ERROR,
                    service="async_pool",
                    worker_id=self._worker_id,
                    error=describe(exc),
                )

    def _unhandled(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """What asyncio reports on the pool's loop (a task a task left behind failed, and
        nobody awaited it): one line, without the traceback asyncio's default handler
        formats wherever the task happens to be collected."""
        exc = context.get("exception")
        self.events.emit(
            MAINTENANCE_FAILED,
            logging.WARNING,
            service="async_pool",
            worker_id=self._worker_id,
            error=str(context.get("message", "")) + (f": {type(exc).__name__}" if exc else ""),
        )

    def _run_of(self, task: asyncio.Task[None]) -> RunningJob | None:
        """The attempt `task` runs (for the loop's watch: which job holds the loop)."""
        for running, run in list(self._tasks.values()):
            if running is task:
                return run
        return None

    def start(self, runs: Sequence[RunningJob]) -> None:
        """One wake-up of the loop for the whole batch: waking it once per attempt (a
        write to its self-pipe each) took 30 % of a busy worker's main thread."""
        self._loop.call_soon_threadsafe(self._start_tasks, list(runs))

    def _start_tasks(self, runs: list[RunningJob]) -> None:
        for run in runs:
            # The loop holds the task until its first step, `_tasks` from then on: a task
            # is found (and cancelled) only once it runs, so its `_run` always reports;
            # one stopped before that cancels itself there.
            self._loop.create_task(self._run(run))

    async def _run(self, run: RunningJob) -> None:
        current = asyncio.current_task()
        assert current is not None
        self._tasks[run.job.lease] = (current, run)
        if run.ended is not None or run.cancel_requested or run.lost:
            # Stopped before its first step (a `_cancel` that ran between `_start_tasks`
            # and this step found nothing): cancel it now, at its first await.
            current.cancel()
        try:
            args = await asyncio.to_thread(call_args, run) if run.job.dependency_results else None
            if run.task is None:
                end = unknown_task_end(run.job.task)
            elif isinstance(args, AttemptEnd):
                end = args
            else:
                ctx = make_context(run, self._worker_id) if needs_context(run.task) else None
                attempt = Attempt(run.job.attempt, run.job.max_retries)
                end = await run_async(
                    run.task, ctx, run, args or run.job.args, self._limit, attempt
                )
        except asyncio.CancelledError:
            end = AttemptEnd(Outcome.CANCELLED, error="cancelled by the worker")
        except BaseException as exc:  # noqa: BLE001 - the guard behind run_async, as above
            end = guarded_end(run, exc, self.events)
        finally:
            self._tasks.pop(run.job.lease, None)
        self._ledger.attempt_ended(run, end)

    def _cancel(self, run: RunningJob) -> None:
        """Cancel the attempt's task once. A forced end reaches the pool twice (its flags'
        notice and the stop itself), and a second cancel would interrupt a coroutine that
        handles the first (`except CancelledError: await cleanup()`), as seen once in a
        few hundred runs of tests/runtime/test_ledger_slots.py."""
        held = self._tasks.get(run.job.lease)
        if held is not None and not held[0].cancelling():
            held[0].cancel()

    def stop(self, run: RunningJob) -> None:
        self._loop.call_soon_threadsafe(self._cancel, run)

    def notify(self, run: RunningJob) -> None:
        if run.cancel_requested or run.lost:
            self.stop(run)

    def close(self) -> None:
        self._closing = True
        self._watch.stop()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
