"""`drain`, `run` and `run_attempt`: a test's jobs run by a real `heartq.Worker`, in this process.

Why a real worker rather than calling the task's function: what a test must catch is
what the worker does to a job (its arguments bound from their JSON, the result stored
as JSON, the retry policy, checkpoints, `ctx.transaction()` fenced on the job, the
dead-letter queue, the app's hooks), and a stand-in that calls the function would pass
tests the real path fails (Celery's `task_always_eager` is the known pitfall). So the
drain starts a `Worker` in burst mode on the thread pool, on a thread of this process
(monkeypatches and fixtures of the test apply to the task's code), steers it from the
calling thread, and reads from the database what was stored.

Steering, because a burst run alone waits out every retry's backoff (5 s, 10 s, 20 s ...
by default): with `run_retries_now`, each retry the worker schedules is made due at once
(`Store.retry_now`: only its `run_at` moves, its attempts count as they did); without
it, the worker is stopped once nothing it can run is left (nothing running here, nothing
runnable now), so a retry waiting out its backoff stays queued and is reported so.

A snooze (`heartq.Snooze`) is steered as a retry: with `run_retries_now` its delay is
cut short too (its job snoozes until its task's `max_snoozes`, then each snooze is a failed
attempt, so the drain still ends); without it, the snoozed job stays queued.

What ran is heard as it happens, of the drain's own worker only: the `job_claimed`,
`job_retry_scheduled` and `job_snoozed` events (heartq's stable event names), and an
attempt hook, registered for the drain alone, that keeps the exception object each
attempt's code raised (the stored error is its text; a `Snooze` it returned is kept as
raised). The periodic scheduler is left out of the drain's worker: a schedule's tick
falling due during a drain must not make a test flaky.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Generator, Sequence
from types import TracebackType
from typing import Any, ParamSpec

from heartq import events, payload, policy
from heartq.app import App, BoundTask, Task
from heartq.display import epoch_of
from heartq.errors import JobNotFound, ResultLost
from heartq.hooks import AttemptInfo
from heartq.model import TERMINAL_STATUSES, JobStatus, Outcome
from heartq.options import Options
from heartq.store import Store
from heartq.testing.jobs import all_jobs
from heartq.testing.records import Attempt, DrainReport, EnqueuedJob, JobRun, listing
from heartq.worker import Worker

P = ParamSpec("P")

DEFAULT_TIMEOUT = 30.0
"""A drain gives up after 30 s by default (`DrainTimeout`, naming what was left)."""
RUN_TIMEOUT = 60.0
"""`run` gives its attempt 60 s, or the task's `timeout` and 10 s more if that is longer."""
RUN_TIMEOUT_MARGIN = 10.0
POLL_INTERVAL = 0.02
"""The drain's worker looks for due jobs every 20 ms (at most; the app's own poll
interval if shorter), so a retry made due is taken at once on SQLite too."""
TICK = 0.02
"""The drain looks at its worker every 20 ms."""
STOP_WAIT = 10.0
"""After a forced stop (a timeout), the worker's thread gets 10 s to end."""
RUN_QUEUE_PREFIX = "heartq-testing-run-"
"""`run` enqueues its job in a queue of its own, named with this prefix."""


class DrainTimeout(TimeoutError):
    """A drain (or `run`) did not end within its timeout. `pending`: the jobs of its
    queues still running or due when it gave up (`EnqueuedJob`); `report`: what ran
    meanwhile. The drain's worker was stopped (what it held went back to the queue)."""

    def __init__(self, timeout: float, pending: list[EnqueuedJob], report: DrainReport) -> None:
        self.timeout = timeout
        self.pending = pending
        self.report = report
        super().__init__(
            f"the drain did not end within {timeout:g} s; still running or due "
            f"({len(pending)}):\n{listing(pending)}\n{report}"
        )


class AttemptFailed(Exception):
    """`run`: the attempt did not succeed, and its code raised nothing to re-raise here
    (it timed out, was cancelled, or returned what is not JSON), or raised what is not an
    `Exception` (`KeyboardInterrupt`, `SystemExit`...: then its `__cause__`). `job`: the
    `JobRun`."""

    def __init__(self, job: JobRun) -> None:
        self.job = job
        attempt = job.attempts[-1] if job.attempts else "no attempt"
        super().__init__(f"{job.task}: {attempt}; the job is now {job.status}\n  {job}")


def drain(
    app: App,
    queues: Sequence[str] | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    run_retries_now: bool = False,
    concurrency: int = 1,
) -> DrainReport:
    """Run every due job of `queues` (None: the queues of the app's tasks, and any queue
    holding a job of one of them that has not ended, waiting ones too) on a real worker in
    this process, jobs that those jobs enqueue included, and return what ran and how each
    ended.

    Without `run_retries_now`, a job that failed and waits out its retry's backoff, or
    snoozed (`heartq.Snooze`: its attempt's outcome `snoozed`), stays queued (its
    `JobRun.status` is `queued`, `run_at` its retry). With it, every retry and every
    snooze is due at once, so each job runs until it succeeds or is dead (its policy's
    count of attempts and its task's `max_snoozes` unchanged). `concurrency`: attempts
    at once (1: one after the other, in the order a worker claims them). `DrainTimeout`
    after `timeout` seconds."""
    payload.check_duration("timeout", timeout)
    payload.check_int("concurrency", concurrency, minimum=1)
    return _Drain(
        app, _queues(app, queues), concurrency=concurrency, run_retries_now=run_retries_now
    ).run(timeout)


def run(task: Task[P, Any] | BoundTask[P], /, *args: P.args, **kwargs: P.kwargs) -> Any:
    """Run one attempt of `task` with these arguments as a worker would: the job is
    enqueued (arguments checked and stored as JSON, enqueue hooks, `meta` and options from
    `task.options(...)`), then one attempt of it runs on a real worker in this process,
    with a real `JobContext` (`ctx.heartbeat`, `ctx.checkpoint`, `ctx.meta`,
    `ctx.transaction()` on the app's database). Returns the result as stored (after its
    JSON round trip); if the attempt failed, or its code failed after its transaction
    committed the job without its result (the result is lost), raises what its code
    raised (with a note naming the job; a `heartq.Snooze` it raised or returned: the job
    is queued, `snoozed`), else `AttemptFailed` (timed out, cancelled, a
    result not JSON), or `heartq.ResultLost` (a result lost otherwise).

    The job runs in a queue of its own (`heartq-testing-run-...`, as `ctx.queue` says),
    so nothing else due runs with it; after a failure it stays as the attempt left it
    (waiting out its retry, or dead): `drain(app, run_retries_now=True)` runs the rest.
    `run_attempt` runs a later attempt (a task's last-attempt branch)."""
    __tracebackhide__ = True  # a failure shows the test's line, then the task's own frames
    return _run(task, 1, args, kwargs)


def run_attempt(
    attempt: int, task: Task[P, Any] | BoundTask[P], /, *args: P.args, **kwargs: P.kwargs
) -> Any:
    """`run`, as attempt number `attempt` of the job (1: its first): `ctx.attempt` says
    so, and a failure is judged as a worker judges that attempt: retried while one is
    left (`attempt <= max_retries`), dead after the last (`max_retries + 1`), the attempt
    hooks told `will_retry` accordingly. The earlier attempts count as made, none of
    them run (`Store.start_at_attempt`). `ValueError` for an attempt past the last. (Not
    an `attempt=` keyword of `run`: that would take a task's own argument of that name.)"""
    __tracebackhide__ = True
    return _run(task, attempt, args, kwargs)


def _run(task: Task[Any, Any] | BoundTask[Any], attempt: int, args: Any, kwargs: Any) -> Any:
    __tracebackhide__ = True
    bound = task if isinstance(task, BoundTask) else BoundTask(task, Options())
    if not isinstance(bound.task, Task):
        raise TypeError(f"run() takes a task of an app (@app.task), got {task!r}")
    if bound.connection is not None:
        raise ValueError("run() enqueues and commits by itself: leave out connection=")
    chosen = dict(bound.chosen.chosen)
    for name in ("delay", "eta"):
        if chosen.get(name) is not None:
            raise ValueError(f"run() runs the job now: leave out {name}=")
    _check_attempt(bound.task, attempt, bound.chosen.chosen.get("max_retries"))
    queue = f"{RUN_QUEUE_PREFIX}{uuid.uuid4().hex[:12]}"
    options = Options.given("heartq.testing.run", {**chosen, "queue": queue})
    job_id = BoundTask(bound.task, options).enqueue(*args, **kwargs)
    app = bound.task.app
    if app.get_job(job_id)["queue"] != queue:
        raise ValueError(
            f"run(): nothing was enqueued: job {job_id} holds the unique key "
            f"{chosen.get('unique_key')!r}"
        )
    if attempt > 1 and not app.store.start_at_attempt(job_id, attempt):
        raise RuntimeError(f"run_attempt(): job {job_id} was claimed before its attempt {attempt}")
    limit = bound.task.timeout
    timeout = RUN_TIMEOUT if limit is None else max(RUN_TIMEOUT, limit + RUN_TIMEOUT_MARGIN)
    report = _Drain(
        app, [queue], concurrency=1, run_retries_now=False, one_attempt=True, grace=timeout
    ).run(timeout)
    job = report.job(job_id)
    if job.status is JobStatus.SUCCEEDED and job.result_lost is None:
        return job.result
    raised = job.exception
    if raised is None and job.result_lost is not None:  # stopped after its commit
        raise ResultLost(job.id, job.result_lost)
    if raised is None:
        raise AttemptFailed(job)
    if not isinstance(raised, Exception):
        # KeyboardInterrupt, SystemExit, GeneratorExit, a CancelledError of its own: the
        # attempt's outcome, not the test run's (re-raised, they would stop pytest itself)
        raise AttemptFailed(job) from raised
    raised.add_note(f"heartq.testing.run: {job}")
    raise raised.with_traceback(_from_the_task(raised.__traceback__))


def _check_attempt(task: Task[Any, Any], attempt: object, max_retries: int | None) -> None:
    """`ValueError` for an attempt number no worker would run: not a whole number from 1,
    or past the last the job's retry policy allows (the task's, or `max_retries=` given
    to `task.options`)."""
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
        raise ValueError(f"attempt must be a whole number from 1, got {attempt!r}")
    retries = policy.resolve(task.policy, None, None, max_retries)["max_retries"]
    if attempt > retries + 1:
        raise ValueError(
            f"attempt {attempt}: a job of task {task.name!r} makes at most {retries + 1} "
            f"(max_retries={retries}); its last is attempt {retries + 1}"
        )


def _from_the_task(traceback: TracebackType | None) -> TracebackType | None:
    """The traceback of what a task raised from its first frame outside heartq: the
    worker's frames that called it (its invocation) say nothing to the test that fails.
    Unchanged when every frame is heartq's (a task of heartq's own)."""
    first = traceback
    while first is not None:
        module = str(first.tb_frame.f_globals.get("__name__", ""))
        if not module.startswith("heartq."):
            break
        first = first.tb_next
    return first or traceback


def _queues(app: App, queues: Sequence[str] | None) -> list[str]:
    """The queues a drain takes jobs from: those named, else those of the app's tasks and
    any holding a job of one of them that has not ended (a queue chosen at enqueue,
    `run`'s own, a pipeline step's `.set(queue=...)` still waiting for its dependencies)."""
    if queues is not None:
        if isinstance(queues, str):
            raise TypeError(f"queues is a list of names, e.g. [{queues!r}], not one string")
        names = {payload.check_name("queue", name) for name in queues}
        if not names:
            raise ValueError("queues: name at least one queue (None: those of the app's tasks)")
        return sorted(names)
    found = {task.queue for task in app.tasks.values()} or {"default"}
    found.update(
        doc["queue"]
        for doc in all_jobs(app.store)
        if doc["task"] in app.tasks and doc["status"] not in TERMINAL_STATUSES
    )
    return sorted(found)


class _Recorder:
    """What the drain's own worker did, heard while entered: the jobs it claimed, in
    order, with each attempt's number and execution id (`job_claimed`); that it scheduled
    a retry (`job_retry_scheduled`); and, from an attempt hook where the code runs, the
    exception each attempt's code raised. With `one_attempt`, the hook asks the worker to
    stop as the first attempt starts: it takes no other job, and the attempt runs on."""

    def __init__(self, app: App, worker: Worker, one_attempt: bool) -> None:
        self._app = app
        self._worker = worker
        self._one_attempt = one_attempt
        self._lock = threading.Lock()
        self.claims: dict[str, list[tuple[int, int]]] = {}
        """job id -> [(execution id, attempt number)], in the order of first claims."""
        self.exceptions: dict[tuple[str, int], BaseException] = {}
        self.retry_scheduled = threading.Event()

    def __enter__(self) -> _Recorder:
        self._app.events.subscribe(self._hear)
        self._app.hooks.attempt(self._around_attempt)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._app.hooks.attempt.remove(self._around_attempt)
        self._app.events.unsubscribe(self._hear)

    def _hear(self, heard: events.Event) -> None:
        event, fields = heard.name, heard.fields
        if fields.get("worker_id") != self._worker.id:
            return
        if event == events.JOB_CLAIMED:
            with self._lock:
                attempts = self.claims.setdefault(fields["job_id"], [])
                attempts.append((fields["execution_id"], fields["attempt"]))
        elif event in (events.JOB_RETRY_SCHEDULED, events.JOB_SNOOZED):
            self.retry_scheduled.set()

    def _around_attempt(self, attempt: AttemptInfo) -> Generator[None, None, None]:
        mine = attempt.worker_id == self._worker.id
        if mine and self._one_attempt:
            self._worker.request_stop()
        yield
        if mine and attempt.exception is not None:
            with self._lock:
                self.exceptions[(attempt.job_id, attempt.execution_id)] = attempt.exception


class _Drain:
    """One drain: a burst worker on a thread of this process, steered from the caller's."""

    def __init__(
        self,
        app: App,
        queues: list[str],
        *,
        concurrency: int,
        run_retries_now: bool,
        one_attempt: bool = False,
        grace: float | None = None,
    ) -> None:
        self.app = app
        self.queues = queues
        self.concurrency = concurrency
        self.run_retries_now = run_retries_now
        self.one_attempt = one_attempt
        self.grace = grace
        """The worker's `shutdown_timeout` (None: the app's): `run` stops its worker as
        the attempt starts, and the attempt must not be cut short by the stop."""

    def run(self, timeout: float) -> DrainReport:
        worker = self._worker()
        failed: list[BaseException] = []

        def work() -> None:
            try:
                worker.run(burst=True)
            except BaseException as exc:  # noqa: BLE001 - raised again in the caller
                failed.append(exc)

        thread = threading.Thread(target=work, name="heartq-testing-drain", daemon=True)
        with _Recorder(self.app, worker, self.one_attempt) as recorder:
            thread.start()
            try:
                pending = self._steer(worker, thread, recorder, time.monotonic() + timeout)
            finally:
                if thread.is_alive():
                    worker.request_stop(force=True)
                    thread.join(STOP_WAIT)
        if failed:
            raise failed[0]
        report = self._report(recorder)
        if pending is not None:
            raise DrainTimeout(timeout, pending, report)
        return report

    def _worker(self) -> Worker:
        settings: dict[str, Any] = {
            "poll_interval": min(POLL_INTERVAL, self.app.settings.poll_interval)
        }
        if self.grace is not None:
            settings["shutdown_timeout"] = self.grace
        return Worker(
            self.app,
            queues=self.queues,
            concurrency=self.concurrency,
            pool="thread",
            periodic=False,
            **settings,
        )

    def _steer(
        self, worker: Worker, thread: threading.Thread, recorder: _Recorder, deadline: float
    ) -> list[EnqueuedJob] | None:
        """Until the worker's thread ends: make retries due as they are scheduled (with
        `run_retries_now`), else stop the worker once nothing it can run is left. Returns
        None, or at the deadline what was still pending."""
        store = self.app.store
        if self.run_retries_now:
            store.retry_now(self.queues)
        while thread.is_alive():
            if time.monotonic() >= deadline:
                return self._pending(store)
            if self.run_retries_now:
                if recorder.retry_scheduled.is_set():
                    recorder.retry_scheduled.clear()
                    store.retry_now(self.queues)
            elif worker.started.is_set() and self._settled(store):
                worker.request_stop()
            thread.join(TICK)
        return None

    def _settled(self, store: Store) -> bool:
        """Nothing left this drain runs: no job of its queues running or runnable now, in
        one snapshot (two looks could miss a job claimed, or a retry due at once, between
        them). A retry waiting out its backoff is left."""
        return not store.has_pending(self.queues, retries=False)

    def _pending(self, store: Store) -> list[EnqueuedJob]:
        """The jobs of the drain's queues running, due now, or (with `run_retries_now`)
        waiting out a retry: what a drain that timed out leaves."""
        now = store.clock()
        found = []
        for queue in self.queues:
            for doc in all_jobs(store, queue=queue):
                if doc["status"] == JobStatus.RUNNING or (
                    doc["status"] == JobStatus.QUEUED
                    and (
                        (epoch_of(doc["run_at"]) or 0.0) <= now
                        or (self.run_retries_now and doc["attempts"] > 0)
                    )
                ):
                    found.append(EnqueuedJob.from_doc(doc))
        return found

    def _report(self, recorder: _Recorder) -> DrainReport:
        runs = []
        for job_id, claims in recorder.claims.items():
            try:
                doc = self.app.get_job(job_id)
            except JobNotFound:  # purged meanwhile: nothing left to tell
                continue
            executions = {e["execution_id"]: e for e in doc["executions"]}
            attempts = []
            for execution_id, number in claims:
                stored = executions.get(execution_id) or {}
                outcome = stored.get("outcome")
                attempts.append(
                    Attempt(
                        number=number,
                        execution_id=execution_id,
                        outcome=Outcome(outcome) if outcome else None,
                        error=stored.get("error"),
                        exception=recorder.exceptions.get((job_id, execution_id)),
                    )
                )
            status = JobStatus(doc["status"])
            runs.append(
                JobRun(
                    id=job_id,
                    task=doc["task"],
                    args=dict(doc["args"] or {}),
                    queue=doc["queue"],
                    meta=dict(doc["meta"] or {}),
                    attempts=tuple(attempts),
                    status=status,
                    result=doc["result"],
                    result_lost=doc["result_lost"],
                    error=doc["error"],
                    dead_reason=doc["dead_reason"],
                    run_at=doc["run_at"] if status is JobStatus.QUEUED else None,
                    snoozes=doc["snoozes"],
                )
            )
        return DrainReport(runs)
