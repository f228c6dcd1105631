"""The worker's own path for a timeout, in-process: the forced end wins.

A task that overruns its `timeout` is told to stop (`ctx.cancelled`; on the async pool
its coroutine is cancelled too) and may then *return a value* at once: the chaos shape
that was once recorded `succeeded`. The forced `timed_out` end was decided first
(`Supervisor.supervise`, or the process pool's watching thread, -> `Ledger.force` ->
`RunningJob.end`, first-wins), so the late
return must be a stale end: no second outcome is queued for the completer, and the job
ends `timed_out`, its result not kept.

The race is made certain rather than left to chance: the completer's first batch is held
until every attempt's code has reported its own (late) end, so a late success that were
counted would sit in the same batch as the timeout, where the store keeps the last
finish of a lease (`LeaseOps.finish`), and the job would end `succeeded`.

Also pinned here, for a pulse that would touch an attempt's records (docs in
`test_every_pool_lets_the_forced_timeout_win`): the pool's end and the supervisor's end
are reported on the one `RunningJob` the ledger holds, and its deadline comes from the
worker's task, whatever policy the claimed job carries (`chosen` 0, stale defaults:
`policy.for_attempt` gives it the task's retries).
"""

from __future__ import annotations

import contextlib
import json
import queue
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from heartq.lifecycle.fate import AttemptEnd
from heartq.model import Finish, JobStatus, Lease, NewJob, Outcome
from heartq.worker import Worker
from heartq.worker.attempt import RunningJob
from heartq.worker.process_pool import ProcessPool
from heartq.worker.supervisor import Supervisor
from tests import pg_harness
from tests.support import STEADY, wait_for

from .conftest import STOP_WITHIN, WorkerThread

TIMEOUT = 0.5
SETTINGS: dict[str, Any] = {**STEADY, "shutdown_timeout": STOP_WITHIN}
"""A 4 s lease, not FAST's 0.6: a loaded machine must not fence the attempt first."""
GATE = 15.0
"""At most this long the completer's first batch waits for the late ends."""

TASKS = '''
"""Tasks that return a value as soon as they are told to stop (after their timeout)."""

import asyncio
import time
from pathlib import Path

import heartq

app = heartq.App()


@heartq_task
def returns_when_told(ctx, marks):
    deadline = time.monotonic() + 10
    while not ctx.cancelled and time.monotonic() < deadline:
        time.sleep(0.002)
    Path(marks, f"returned-{ctx.job_id}").write_text("")
    return {"late": True}


@heartq_task
async def returns_when_told_async(ctx, marks):
    try:
        while not ctx.cancelled:
            await asyncio.sleep(0.002)
    except asyncio.CancelledError:
        pass  # swallowed: returns a value even so
    Path(marks, f"returned-{ctx.job_id}").write_text("")
    return {"late": True}


@heartq_task
def returns_late(ctx, marks):
    time.sleep(0.9)  # ignores ctx; returns 0.4 s after its deadline
    Path(marks, f"returned-{ctx.job_id}").write_text("")
    return {"late": True}


@heartq_task
def returns_in_time(ctx):
    time.sleep(0.2)  # well within its timeout
    return {"in_time": True}


@heartq_task
def beats_without_pause(ctx):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        ctx.heartbeat()  # no pause: its child's pipe is never empty for long


@heartq_task
def commits_late(ctx):
    with ctx.transaction():
        time.sleep(1.5)  # the block is open when the deadline passes
    return {"late": True}
'''.replace("@heartq_task", f"@app.task(timeout={TIMEOUT}, max_retries=0, retry_backoff=0.0)")


@pytest.fixture
def tasks(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ModuleType]:
    """The tasks' module (importable by the process pool's children), its app on a fresh
    queue of the current backend."""
    name = f"timeout_tasks_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(TASKS)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = __import__(name)
    with contextlib.ExitStack() as stack:
        if backend == "postgres":
            base = request.getfixturevalue("pg_server_url")
            url = stack.enter_context(pg_harness.schema_url(base))
        else:
            url = f"sqlite:///{tmp_path / 'q.db'}"
        module.app.use_url(url)
        stack.callback(module.app.close)
        yield module


class Recorder:
    """Every end reported to the ledger (by the supervisor or a pool), every outcome queued
    for the completer, and a gate holding the completer's first batch until each attempt
    was reported twice (forced, then by its own code)."""

    def __init__(self, worker: Worker, jobs: int) -> None:
        self.ends: dict[Lease, list[tuple[RunningJob, Outcome]]] = {}
        self.queued: dict[Lease, list[Finish]] = {}
        self.both_reported = threading.Event()
        self.gate_passed = False
        self._jobs = jobs
        self._lock = threading.Lock()
        ledger = worker.ledger
        real_ended, real_force = ledger.attempt_ended, ledger.force

        def report(run: RunningJob, end: AttemptEnd) -> None:
            with self._lock:
                self.ends.setdefault(run.job.lease, []).append((run, end.outcome))

        def reported_twice() -> None:
            with self._lock:
                reported = [ends for ends in self.ends.values() if len(ends) >= 2]
            if len(reported) >= self._jobs:
                self.both_reported.set()

        def force(run: RunningJob, end: AttemptEnd) -> None:  # the supervisor's end
            report(run, end)
            real_force(run, end)
            reported_twice()

        def attempt_ended(run: RunningJob, end: AttemptEnd) -> None:  # the code's own end
            report(run, end)
            real_ended(run, end)
            reported_twice()

        recorder = self

        class Outcomes(queue.SimpleQueue[Any]):
            def put(self, item: Any, *args: Any, **kwargs: Any) -> None:
                if item is not None:
                    run, finish = item
                    with recorder._lock:
                        recorder.queued.setdefault(run.job.lease, []).append(finish)
                super().put(item, *args, **kwargs)

            def get(self, *args: Any, **kwargs: Any) -> Any:
                item = super().get(*args, **kwargs)
                if not recorder.gate_passed:  # the first batch only; later ones not held
                    recorder.both_reported.wait(GATE)
                    recorder.gate_passed = True
                return item

        # Instance attributes: the pools and `Ledger.force` call through them; the
        # completer reads the ledger's queue of outcomes (before the worker runs: empty).
        ledger.attempt_ended = attempt_ended  # type: ignore[method-assign]
        ledger.force = force  # type: ignore[method-assign]
        ledger.outcomes = Outcomes()


@pytest.mark.parametrize("pool", ["thread", "process", "async"])
def test_every_pool_lets_the_forced_timeout_win(
    tasks: ModuleType, pool: str, tmp_path: Path
) -> None:
    """Both tasks overrun, are told, and return a value at once; each job ends dead after
    one `timed_out` attempt. One is enqueued by its registered task; the other is stored
    as a job enqueued by name with stale defaults and `chosen` 0 (3 retries, a 5 s
    backoff): `for_attempt` gives it the task's `max_retries` 0, and the deadline still
    comes from the task's `timeout`."""
    app = tasks.app
    marks = str(tmp_path)
    worker = Worker(app, pool=pool, app_ref=f"{tasks.__name__}:app", **SETTINGS)
    recorder = Recorder(worker, jobs=2)
    with_task = app.enqueue("returns_when_told_async", {"marks": marks})
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        assert worker.started.wait(20), "worker did not start"
        (by_name,) = app.store.enqueue(  # after the declaration: no re-route comes for it
            [
                NewJob(
                    task="returns_when_told",
                    args_json=json.dumps({"marks": marks}),
                    max_retries=3,
                    retry_backoff=5.0,
                    chosen=0,
                )
            ]
        )
        jobs = (with_task, by_name)
        try:
            wait_for(
                lambda: all(app.get_job(j)["status"] in ("dead", "succeeded") for j in jobs),
                30,
                "both jobs to end",
            )
        except AssertionError as exc:
            seen = {j: app.get_job(j)["executions"] for j in jobs}
            raise AssertionError(f"{exc}: ends {recorder.ends}, executions {seen}") from None
        assert recorder.both_reported.is_set(), recorder.ends
    finally:
        worker.request_stop()
        thread.join(15)
    assert not thread.is_alive(), "worker did not stop"

    for job_id in jobs:
        job = app.get_job(job_id)
        outcomes = [e["outcome"] for e in job["executions"]]
        assert (job["status"], outcomes) == ("dead", ["timed_out"]), (job_id, job["error"])
        assert job["result"] is None
        assert job["dead_reason"].startswith("timed out")

        lease = Lease(job_id, 1)
        ends = recorder.ends[lease]
        (run, forced), *late = ends
        # The forced end (the supervisor's; the process pool's own, on its child's
        # clock) came first and is the one recorded, at the deadline the worker's task
        # gave (not a policy's: the by-name job carries the defaults), counted from when
        # the code began: the attempt's start, or when its child said it began.
        assert forced is Outcome.TIMED_OUT, ends
        assert run.ended is not None and run.ended.outcome is Outcome.TIMED_OUT
        began = run.began if pool == "process" else run.started
        assert began is not None and began >= run.started
        assert run.deadline == pytest.approx(began + TIMEOUT)
        assert run.job.max_retries == 0  # the task's, for the by-name job too
        # The attempt's code did end afterwards, on the same RunningJob (one record per
        # attempt: a pulse must not hand the pool or the supervisor a copy).
        assert late, ends
        assert all(other is run for other, _ in late), ends
        if pool != "process":  # a child is killed at once; threads and coroutines return
            assert Path(marks, f"returned-{job_id}").exists()
            # What the code's own end was: its value (the late success), except a plain
            # function on the async pool, whose awaiting coroutine was cancelled.
            plain_on_async = pool == "async" and job_id == by_name
            own = Outcome.CANCELLED if plain_on_async else Outcome.SUCCEEDED
            assert [outcome for _, outcome in late] == [own], ends
        # Only the forced end reached the completer.
        assert [(f.outcome, f.status) for f in recorder.queued[lease]] == [
            (Outcome.TIMED_OUT, JobStatus.DEAD)
        ], recorder.queued[lease]


def test_a_transaction_open_past_the_deadline_does_not_commit_a_success(
    tasks: ModuleType,
) -> None:
    """A plain function on the thread pool (which cannot be killed) is inside its
    `ctx.transaction()` block when its deadline passes, and leaves it after. The worker
    decided `timed_out`; the block's commit must not make the job `succeeded`.

    The rule, the same on both backends: the block's commit checks the attempt's end,
    under the attempt's lock, before its finish statement; a decided end wins over a
    commit not yet begun (everything rolls back), and the supervisor leaves alone a
    commit already under way. (Before it, SQLite let the block commit: it held the
    file's write lock, the completer's finish waited for it, and the timeout was refused
    as a lost lease.)"""
    app = tasks.app
    job_id = app.enqueue("commits_late")
    with WorkerThread(Worker(app, **SETTINGS)):
        wait_for(
            lambda: app.get_job(job_id)["status"] in ("dead", "succeeded"), 30, "the job to end"
        )
    job = app.get_job(job_id)
    assert (job["status"], [e["outcome"] for e in job["executions"]]) == ("dead", ["timed_out"])


def test_a_return_after_the_deadline_times_out_even_if_the_supervisor_is_late(
    tasks: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The supervisor enforces deadlines from its own thread, so it may come late: a
    loaded machine, or a pulse that would fold supervision into a once-a-second loop.
    An attempt whose code returns after its deadline but before the supervisor's pass has
    still overrun its timeout: it ends `timed_out`, not `succeeded`. Here the supervisor
    is held until the code has returned."""
    app = tasks.app
    returned = tmp_path / "returned"
    returned.mkdir()
    real_supervise = Supervisor.supervise

    def late_supervise(self: Supervisor) -> None:
        if any(returned.iterdir()):  # held until the code returned: it comes too late
            real_supervise(self)

    monkeypatch.setattr(Supervisor, "supervise", late_supervise)
    job_id = app.enqueue("returns_late", {"marks": str(returned)})
    with WorkerThread(Worker(app, **SETTINGS)):
        wait_for(
            lambda: app.get_job(job_id)["status"] in ("dead", "succeeded"), 30, "the job to end"
        )
    job = app.get_job(job_id)
    assert (job["status"], [e["outcome"] for e in job["executions"]]) == ("dead", ["timed_out"])
    assert job["result"] is None
    assert job["dead_reason"].startswith("timed out")


def test_a_timeout_shorter_than_the_poll_interval_is_enforced_on_time(
    app: Any, run_worker: Any
) -> None:
    """The supervisor idles for up to the poll interval (30 s here) and is woken by a
    claim only for an attempt due before its next pass: a 0.5 s timeout is, so the job
    ends `timed_out` in about half a second, not at the next idle pass."""

    @app.task(timeout=TIMEOUT)
    def overruns(ctx: Any) -> None:
        deadline = time.monotonic() + 20
        while not ctx.cancelled and time.monotonic() < deadline:
            time.sleep(0.01)

    with run_worker(app, poll_interval=30.0, lease=4.0):
        job_id = app.enqueue("overruns", {})
        began = time.monotonic()
        wait_for(
            lambda: any(e["ended_at"] for e in app.get_job(job_id)["executions"]),
            timeout=15,
            what="the timeout to end the attempt",
        )
        ended = time.monotonic() - began
    execution = app.get_job(job_id)["executions"][0]
    assert execution["outcome"] == Outcome.TIMED_OUT, execution
    assert ended < 10.0, f"ended {ended:.1f} s after the enqueue"


def test_a_child_that_beats_faster_than_its_parent_reads_is_still_timed_out(
    tasks: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process pool ends its timeouts once it read what its child sent, so that a
    report or a beat waiting in the pipe is judged at its child's time. A task calling
    `ctx.heartbeat()` in a loop without a pause, on a parent that reads its beats more
    slowly (here 2 ms a beat, as a starved one might), never leaves the pipe empty:
    waiting for it to be would end the attempt only when its code gives up (10 s). A
    beat the child sent past its deadline ends it, a pipe's worth of beats later."""
    real_touch = RunningJob.touch

    def slow_touch(run: RunningJob, progress: Any, *, at: float | None = None) -> None:
        if at is not None:  # a child's beat, read by its parent
            time.sleep(0.002)
        real_touch(run, progress, at=at)

    monkeypatch.setattr(RunningJob, "touch", slow_touch)
    job = _ended_on_the_process_pool(tasks, "beats_without_pause")
    assert (job["status"], [e["outcome"] for e in job["executions"]]) == ("dead", ["timed_out"])
    execution = job["executions"][0]
    ran = _seconds(execution["ended_at"]) - _seconds(execution["started_at"])
    assert ran < 8.0, ran  # ended at its 0.5 s timeout, not when its code gave up (10 s)


def test_a_child_slow_to_start_is_not_timed_out_for_it(
    tasks: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process-pool child can take longer to start than its task's timeout (the
    forkserver, the app's import, a loaded machine). The timeout counts from when the
    child began the code, so a task that returns well within it succeeds however long
    its child took to start (here 1.5 s, three timeouts, made so before the job is sent
    to it). Counted from the claim, it ended `timed_out`."""
    real_send = ProcessPool._send

    def slow_start(pool: ProcessPool, job_id: str, fields: dict[str, Any]) -> Any:
        time.sleep(3 * TIMEOUT)  # the child's start, slow
        return real_send(pool, job_id, fields)

    monkeypatch.setattr(ProcessPool, "_send", slow_start)
    job = _ended_on_the_process_pool(tasks, "returns_in_time")
    assert (job["status"], [e["outcome"] for e in job["executions"]]) == (
        "succeeded",
        ["succeeded"],
    ), job["error"]


def _ended_on_the_process_pool(tasks: ModuleType, task: str) -> dict[str, Any]:
    """A job of `task` run by a worker of the process pool, as it is once it ended."""
    app = tasks.app
    job_id = app.enqueue(task)
    worker = Worker(app, pool="process", app_ref=f"{tasks.__name__}:app", **SETTINGS)
    with WorkerThread(worker):
        wait_for(
            lambda: app.get_job(job_id)["status"] in ("dead", "succeeded"), 30, "the job to end"
        )
    job: dict[str, Any] = app.get_job(job_id)
    return job


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
