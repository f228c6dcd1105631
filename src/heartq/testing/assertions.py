"""What was enqueued, and assertions about it, read from the queue's database.

Why the database rather than a record of this process's enqueues: a job counts once it
is stored, however it got there (`task.enqueue`, by name, in the caller's transaction
once committed, from another thread or process, by a job during a drain), and only then;
an enqueue that raised, or whose transaction rolled back, stored nothing.

A job matches when every criterion given holds: its task; `args` and `meta` as a subset
(each key given has that value; keys not given are not compared; a nested mapping is
itself a subset, at any depth, and a list matches item by item, its length exactly); its
queue; its status; when it may run (`run_at`, within `run_at_tolerance`). By default
only the jobs that have not ended (`PENDING`: waiting, queued, running, and any state
not final a later version adds), so a refutation after a drain is not failed by the jobs
the drain ran; `status="succeeded"`, several (`status=("succeeded", "dead")`) or
`status="any"` ask for others. A failed assertion lists every job of the queue, the
matching ones marked, so the test explains itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any

from heartq import payload
from heartq.app import App, Task
from heartq.model import TERMINAL_STATUSES, JobStatus
from heartq.testing.jobs import all_jobs
from heartq.testing.records import EnqueuedJob, EnqueuedJobs, listing

POLL = 0.02
"""`within=` looks again every 20 ms."""
ANY = "any"
"""`status="any"`: a job of any status, ended or not."""
PENDING = frozenset(s for s in JobStatus if s not in TERMINAL_STATUSES)
"""The statuses looked at by default: jobs that have not ended."""
RUN_AT_TOLERANCE = 1.0
"""`run_at=` matches a job due within 1 s of it, by default."""

Statuses = str | Iterable[str] | None
"""A status, several, `"any"`, or None (the jobs that have not ended, `PENDING`)."""


def statuses(status: Statuses) -> frozenset[JobStatus]:
    """The statuses a `status=` asks for; `ValueError` naming one that does not exist."""
    if status is None:
        return PENDING
    if status == ANY:
        return frozenset(JobStatus)
    if isinstance(status, str):
        return frozenset({JobStatus(status)})
    chosen = frozenset(JobStatus(s) for s in status)
    if not chosen:
        raise ValueError('status: name at least one status (or "any")')
    return chosen


def enqueued(
    app: App,
    task: Task[Any, Any] | str | None = None,
    *,
    queue: str | None = None,
    status: Statuses = None,
) -> EnqueuedJobs:
    """The jobs in the app's queue database (of `task`, in `queue`) with `status` (by
    default those that have not ended; `"any"`, one status or several), oldest first.
    Printed, one readable line per job."""
    name = None if task is None else _task_name(task)
    wanted = statuses(status)
    one = next(iter(wanted)) if len(wanted) == 1 else None  # filtered by the database
    docs = all_jobs(app.store, task=name, queue=queue, status=one)
    return EnqueuedJobs(
        job for job in map(EnqueuedJob.from_doc, docs) if job.status in wanted
    )
@dataclass(frozen=True)
class _Wanted:
    """What an assertion looks for, and how it says so."""

    task: str | None
    args: Mapping[str, Any] | None
    queue: str | None
    meta: Mapping[str, Any] | None
    status: frozenset[JobStatus]
    said_status: Statuses
    run_at: datetime | None
    tolerance: float

    def matches(self, job: EnqueuedJob) -> bool:
        return (
            (self.task is None or job.task == self.task)
            and (self.queue is None or job.queue == self.queue)
            and job.status in self.status
            and matches(self.args, job.args)
            and matches(self.meta, job.meta)
            and self._due(job)
        )

    def _due(self, job: EnqueuedJob) -> bool:
        if self.run_at is None:
            return True
        if job.run_at is None:
            return False
        due = datetime.fromisoformat(job.run_at)
        return abs((due - self.run_at).total_seconds()) <= self.tolerance

    def __str__(self) -> str:
        said = ["any task" if self.task is None else f"task {self.task!r}"]
        if self.args is not None:
            said.append(f"with args including {dict(self.args)!r}")
        if self.meta is not None:
            said.append(f"with meta including {dict(self.meta)!r}")
        if self.queue is not None:
            said.append(f"in queue {self.queue!r}")
        if self.run_at is not None:
            said.append(f"due at {self.run_at.isoformat()} (+/- {self.tolerance:g} s)")
        if self.said_status is None:
            said.append("not ended")
        elif self.said_status != ANY:
            said.append(f"now {' or '.join(sorted(self.status))}")
        return " ".join(said)


def matches(wanted: Any, found: Any) -> bool:
    """Whether `found` holds `wanted`: a mapping as a subset (each key given, its value
    matched the same way, at any depth), a list or tuple item by item (the same length),
    anything else equal. None wanted: anything."""
    return wanted is None or _holds(wanted, found)


def _holds(wanted: Any, found: Any) -> bool:
    if isinstance(wanted, Mapping):
        return isinstance(found, Mapping) and all(
            k in found and _holds(v, found[k]) for k, v in wanted.items()
        )
    if isinstance(wanted, list | tuple):
        return (
            isinstance(found, list | tuple)
            and len(found) == len(wanted)
            and all(_holds(w, f) for w, f in zip(wanted, found, strict=True))
        )
    return bool(found == wanted)


def _task_name(task: Any) -> str:
    if isinstance(task, Task):
        return task.name
    if isinstance(task, str):
        return payload.check_name("task", task)
    raise TypeError(f"task must be a heartq.Task or a task's name, got {task!r}")


def _app_for(task: Any, app: App | None, where: str) -> App:
    if app is not None:
        return app
    if isinstance(task, Task):
        return task.app
    given = "no task is named" if task is None else f"task {task!r} is given by name"
    raise TypeError(f"{where}: {given}: pass app= (the heartq.App whose queue to look in)")


def _wanted(
    task: Any,
    args: Mapping[str, Any] | None,
    queue: str | None,
    meta: Mapping[str, Any] | None,
    status: Statuses,
    run_at: datetime | None = None,
    run_at_tolerance: float = RUN_AT_TOLERANCE,
) -> _Wanted:
    for what, value in (("args", args), ("meta", meta)):
        if value is not None and not isinstance(value, Mapping):
            raise TypeError(f"{what} must be a mapping (keys to match), got {value!r}")
    if run_at is not None and (not isinstance(run_at, datetime) or run_at.utcoffset() is None):
        raise TypeError(f"run_at must be a timezone-aware datetime, got {run_at!r}")
    payload.check_duration("run_at_tolerance", run_at_tolerance, allow_zero=True)
    name = None if task is None else _task_name(task)
    return _Wanted(
        name, args, queue, meta, statuses(status), status, run_at, run_at_tolerance
    )


def _check_count(count: int | None) -> None:
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
        raise ValueError(f"count must be a whole number >= 0, got {count!r}")


def _enough(found: int, count: int | None) -> bool:
    return found >= 1 if count is None else found == count


def _failure(
    expected: str, wanted: _Wanted, jobs: list[EnqueuedJob], found: list[EnqueuedJob], held: str
) -> AssertionError:
    """`expected ...; found N.` and every job looked at, the matches marked."""
    return AssertionError(
        f"expected {expected} of {wanted}; found {len(found)}.\n"
        f"{held} {len(jobs)} job(s) (* marks a match):\n{listing(jobs, found)}"
    )


def _how_many(count: int | None) -> str:
    return "a job" if count is None else f"{count} job(s)"


def _waiting(within: float, look: Callable[[], bool]) -> None:
    """Look until `look()` says done or `within` seconds passed (0: once)."""
    payload.check_duration("within", within, allow_zero=True)
    deadline = time.monotonic() + within
    while not look() and time.monotonic() < deadline:
        time.sleep(POLL)


def assert_enqueued(
    task: Task[Any, Any] | str | None = None,
    args: Mapping[str, Any] | None = None,
    *,
    app: App | None = None,
    queue: str | None = None,
    meta: Mapping[str, Any] | None = None,
    status: Statuses = None,
    run_at: datetime | None = None,
    run_at_tolerance: float = RUN_AT_TOLERANCE,
    count: int | None = None,
    within: float = 0.0,
) -> EnqueuedJobs:
    """Assert that a job of `task` (None: of any task; then `app=` is needed) matching
    `args` (a subset, nested mappings too), `queue`, `meta` (a subset), `status` (by
    default not ended; `"any"`, one or several) and `run_at` (due within
    `run_at_tolerance` seconds of it) is in the queue: at least one, or exactly `count`.
    `within=S` waits up to S seconds for it (an enqueue by another thread or process, a
    background task); 0 looks once. Returns the matching jobs, oldest first. `app`:
    needed for a task given by name (a `Task` knows its app)."""
    __tracebackhide__ = True  # a failure shows the test's line and the queue, not this code
    target = _app_for(task, app, "assert_enqueued")
    wanted = _wanted(task, args, queue, meta, status, run_at, run_at_tolerance)
    _check_count(count)
    seen: dict[str, list[EnqueuedJob]] = {}

    def look() -> bool:
        jobs = seen["jobs"] = enqueued(target, status=ANY)
        found = seen["found"] = [job for job in jobs if wanted.matches(job)]
        too_many = count is not None and len(found) > count
        return _enough(len(found), count) or too_many

    _waiting(within, look)
    if _enough(len(seen["found"]), count):
        return EnqueuedJobs(seen["found"])
    waited = f" (waited {within:g} s)" if within else ""
    raise _failure(
        _how_many(count), wanted, seen["jobs"], seen["found"], f"The queue holds{waited}"
    )


def assert_not_enqueued(
    task: Task[Any, Any] | str | None = None,
    args: Mapping[str, Any] | None = None,
    *,
    app: App | None = None,
    queue: str | None = None,
    meta: Mapping[str, Any] | None = None,
    status: Statuses = None,
    run_at: datetime | None = None,
    run_at_tolerance: float = RUN_AT_TOLERANCE,
    within: float = 0.0,
) -> None:
    """Assert that no job matching (as `assert_enqueued`: by default, of those not ended)
    is in the queue, and none appears for `within` seconds (another thread's enqueue that
    must not happen); the failure lists the jobs that match."""
    __tracebackhide__ = True
    target = _app_for(task, app, "assert_not_enqueued")
    wanted = _wanted(task, args, queue, meta, status, run_at, run_at_tolerance)
    seen: dict[str, list[EnqueuedJob]] = {}

    def look() -> bool:
        jobs = seen["jobs"] = enqueued(target, status=ANY)
        seen["found"] = [job for job in jobs if wanted.matches(job)]
        return bool(seen["found"])

    _waiting(within, look)
    if seen["found"]:
        raise _failure("no job", wanted, seen["jobs"], seen["found"], "The queue holds")


def expect_enqueued(
    task: Task[Any, Any] | str | None = None,
    args: Mapping[str, Any] | None = None,
    *,
    app: App | None = None,
    queue: str | None = None,
    meta: Mapping[str, Any] | None = None,
    status: Statuses = None,
    run_at: datetime | None = None,
    run_at_tolerance: float = RUN_AT_TOLERANCE,
    count: int | None = None,
) -> ExpectEnqueued:
    """`with expect_enqueued(task, ...) as jobs:` asserts, when the block ends, that the
    block enqueued a matching job (at least one, or exactly `count`): jobs stored before
    it do not count. `jobs` is then the list of those it enqueued."""
    target = _app_for(task, app, "expect_enqueued")
    wanted = _wanted(task, args, queue, meta, status, run_at, run_at_tolerance)
    _check_count(count)
    return ExpectEnqueued(target, wanted, count)


class ExpectEnqueued:
    """The context manager `expect_enqueued` returns: a class, not a generator under
    `contextlib.contextmanager`, so that a failure's traceback holds no frame of heartq's
    or contextlib's, only the test's `with` line (`__tracebackhide__` in `__exit__`)."""

    def __init__(self, app: App, wanted: _Wanted, count: int | None) -> None:
        self._app = app
        self._wanted = wanted
        self._count = count
        self._made = EnqueuedJobs()
        self._before: set[str] = set()

    def __enter__(self) -> EnqueuedJobs:
        self._before = {job.id for job in enqueued(self._app, status=ANY)}
        return self._made

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        __tracebackhide__ = True
        if exc_type is not None:
            return  # the block's own error is the test's failure
        jobs = [job for job in enqueued(self._app, status=ANY) if job.id not in self._before]
        found = [job for job in jobs if self._wanted.matches(job)]
        if not _enough(len(found), self._count):
            expected = f"the block to enqueue {_how_many(self._count)}"
            raise _failure(expected, self._wanted, jobs, found, "The block enqueued")
        self._made.extend(found)
