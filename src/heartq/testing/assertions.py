"""What was enqueued, and assertions about it, read from the queue's database.

Why the database rather than a record of this process's enqueues: a job counts once it
is stored, however it got there (`task.enqueue`, by name, in the caller's transaction
once committed, from another thread or process, by a job during a drain), and only then;
an enqueue that raised, or whose transaction rolled back, stored nothing.

A job matches when every criterion given holds: its task; `args` and `meta` as a subset
(each key given has that value; keys not given are not compared); its queue; its status.
Any status by default: a job that already ran was enqueued all the same (`status=
"queued"` asks for those still waiting). A failed assertion lists every job of the queue,
the matching ones marked, so the test explains itself.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from heartq import payload
from heartq.app import App, Task
from heartq.model import JobStatus
from heartq.testing.jobs import all_jobs
from heartq.testing.records import EnqueuedJob, EnqueuedJobs, listing

POLL = 0.02
"""`within=` looks again every 20 ms."""


def enqueued(
    app: App,
    task: Task[Any, Any] | str | None = None,
    *,
    queue: str | None = None,
    status: str | None = None,
) -> EnqueuedJobs:
    """Every job in the app's queue database (of `task`, in `queue`, with `status`, when
    given), oldest first: what was enqueued. Printed, one readable line per job."""
    name = None if task is None else _task_name(task)
    if status is not None:
        status = JobStatus(status)  # a ValueError naming a status that does not exist
    docs = all_jobs(app.store, task=name, queue=queue, status=status)
    return EnqueuedJobs(EnqueuedJob.from_doc(doc) for doc in docs)


@dataclass(frozen=True)
class _Wanted:
    """What an assertion looks for, and how it says so."""

    task: str
    args: Mapping[str, Any] | None
    queue: str | None
    meta: Mapping[str, Any] | None
    status: JobStatus | None

    def matches(self, job: EnqueuedJob) -> bool:
        return (
            job.task == self.task
            and (self.queue is None or job.queue == self.queue)
            and (self.status is None or job.status == self.status)
            and _subset(self.args, job.args)
            and _subset(self.meta, job.meta)
        )

    def __str__(self) -> str:
        said = [f"task {self.task!r}"]
        if self.args is not None:
            said.append(f"with args including {dict(self.args)!r}")
        if self.meta is not None:
            said.append(f"with meta including {dict(self.meta)!r}")
        if self.queue is not None:
            said.append(f"in queue {self.queue!r}")
        if self.status is not None:
            said.append(f"now {self.status}")
        return " ".join(said)


def _subset(wanted: Mapping[str, Any] | None, found: Mapping[str, Any]) -> bool:
    return wanted is None or all(k in found and found[k] == v for k, v in wanted.items())


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
    raise TypeError(
        f"{where}: task {task!r} is given by name: pass app= (the heartq.App whose queue "
        "to look in)"
    )


def _wanted(
    task: Any,
    args: Mapping[str, Any] | None,
    queue: str | None,
    meta: Mapping[str, Any] | None,
    status: str | None,
) -> _Wanted:
    for what, value in (("args", args), ("meta", meta)):
        if value is not None and not isinstance(value, Mapping):
            raise TypeError(f"{what} must be a mapping (keys to match), got {value!r}")
    checked = None if status is None else JobStatus(status)
    return _Wanted(_task_name(task), args, queue, meta, checked)


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


def assert_enqueued(
    task: Task[Any, Any] | str,
    args: Mapping[str, Any] | None = None,
    *,
    app: App | None = None,
    queue: str | None = None,
    meta: Mapping[str, Any] | None = None,
    status: str | None = None,
    count: int | None = None,
    within: float = 0.0,
) -> EnqueuedJobs:
    """Assert that a job of `task` matching `args` (a subset), `queue`, `meta` (a
    subset) and `status` is in the queue: at least one, or exactly `count`. `within=S`
    waits up to S seconds for it (an enqueue by another thread or process, a background
    task); 0 looks once. Returns the matching jobs, oldest first. `app`: needed for a task
    given by name (a `Task` knows its app)."""
    __tracebackhide__ = True  # a failure shows the test's line and the queue, not this code
    target = _app_for(task, app, "assert_enqueued")
    wanted = _wanted(task, args, queue, meta, status)
    _check_count(count)
    payload.check_duration("within", within, allow_zero=True)
    deadline = time.monotonic() + within
    while True:
        jobs = enqueued(target)
        found = [job for job in jobs if wanted.matches(job)]
        if _enough(len(found), count):
            return EnqueuedJobs(found)
        too_many = count is not None and len(found) > count
        if too_many or time.monotonic() >= deadline:
            waited = f" (waited {within:g} s)" if within else ""
            raise _failure(_how_many(count), wanted, jobs, found, f"The queue holds{waited}")
        time.sleep(POLL)


def assert_not_enqueued(
    task: Task[Any, Any] | str,
    args: Mapping[str, Any] | None = None,
    *,
    app: App | None = None,
    queue: str | None = None,
    meta: Mapping[str, Any] | None = None,
    status: str | None = None,
) -> None:
    """Assert that no job of `task` matching `args`, `queue`, `meta` and `status` (as
    `assert_enqueued`) is in the queue; the failure lists the jobs that match."""
    __tracebackhide__ = True
    target = _app_for(task, app, "assert_not_enqueued")
    wanted = _wanted(task, args, queue, meta, status)
    jobs = enqueued(target)
    found = [job for job in jobs if wanted.matches(job)]
    if found:
        raise _failure("no job", wanted, jobs, found, "The queue holds")


def expect_enqueued(
    task: Task[Any, Any] | str,
    args: Mapping[str, Any] | None = None,
    *,
    app: App | None = None,
    queue: str | None = None,
    meta: Mapping[str, Any] | None = None,
    status: str | None = None,
    count: int | None = None,
) -> ExpectEnqueued:
    """`with expect_enqueued(task, ...) as jobs:` asserts, when the block ends, that the
    block enqueued a matching job (at least one, or exactly `count`): jobs stored before
    it do not count. `jobs` is then the list of those it enqueued."""
    target = _app_for(task, app, "expect_enqueued")
    wanted = _wanted(task, args, queue, meta, status)
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
        self._before = {job.id for job in enqueued(self._app)}
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
        jobs = [job for job in enqueued(self._app) if job.id not in self._before]
        found = [job for job in jobs if self._wanted.matches(job)]
        if not _enough(len(found), self._count):
            expected = f"the block to enqueue {_how_many(self._count)}"
            raise _failure(expected, self._wanted, jobs, found, "The block enqueued")
        self._made.extend(found)
