"""Hooks: a user's code around every enqueue, every attempt, and a worker's start and stop.

One mechanism for every kind of task (sync or async) on every pool (threads, asyncio, the
process pool's children): a hook is a plain function of one argument, registered on the
app (`@app.hooks.attempt`). A plain function runs before; a generator function runs
around: its code before `yield` runs before, its code after `yield` runs after, with the
outcome filled in (the shape of `contextlib.contextmanager`, without its `with`):

    @app.hooks.attempt
    def timed(attempt: heartq.AttemptInfo) -> Iterator[None]:
        started = time.monotonic()
        yield
        log.info("%s %s in %.3fs", attempt.task, attempt.outcome, time.monotonic() - started)

Why generators rather than a pair of callbacks: what a hook opens before (a span, a
context variable, a timer) is closed after in the same frame, and for an attempt in the
same thread or asyncio task as the task's code, so a context it sets is the code's context.

Hooks are one kind of subscriber of the app's event stream (`app.events.hooks` is
`app.hooks`: `heartq.event_stream`), the kind that runs around what it observes, where it
runs. Hooks observe; they decide nothing. A hook that raises (before or after) is told
to the app's stream (`hook_failed`, so logged) and skipped: the job is still enqueued,
the attempt still runs, its outcome and result are what the code made them. The one
thing a hook may change is an enqueued job's `meta` (a JSON object kept with the job,
given to each attempt as `ctx.meta`).

Order: hooks run in the order they were registered before, and in the reverse order after
(as nested `with` blocks would), so the first registered wraps all the others.

An attempt whose worker or child process died runs no attempt hook after: nothing is left
to run it. The crash hooks (`@app.hooks.crash`) are for that: they run in the process
that found the crash and ended the attempt (a worker's lease reclaimer, monitor or liveness probe,
its startup reconciliation, or the process pool's parent of a child that died), once per
crashed attempt, after the commit that ended it. Fenced like every reclaim: of racing
reclaimers only the one whose write landed runs them (at most once: a reclaimer that dies
between its commit and its hooks runs none).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
import logging
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any, Generic, Protocol, TypeVar, cast

from heartq import events, payload
from heartq.model import (
    AttemptRef,
    JobStatus,
    NamesAnAttempt,
    NamesARunningAttempt,
    NewJob,
    Outcome,
    Reclaimed,
)
from heartq.timeutil import utc

Subject = TypeVar("Subject")
_NOTHING = contextlib.nullcontext()
Hook = Callable[[Subject], "Generator[None, None, None] | None"]
"""A hook: a plain function (runs before) or a generator function (runs around)."""


class Emit(Protocol):
    """Where a hook's failure is told: its app's stream (`EventStream.emit`)."""

    def __call__(self, event: str, level: int = ..., /, **fields: Any) -> None: ...


@dataclass
class EnqueueInfo:
    """One job as it will be stored, for the enqueue hooks. `meta` is theirs to change (a
    JSON object: string keys, JSON values); the rest is for reading. After: `job_id` (the
    stored job's, or the job already holding its unique key), or `exception` if the
    enqueue failed (nothing stored)."""

    task: str
    args: Mapping[str, Any]
    queue: str
    meta: dict[str, Any] = field(default_factory=dict)
    job_id: str | None = None
    exception: BaseException | None = None


@dataclass
class AttemptInfo(NamesARunningAttempt):
    """One attempt, for the attempt hooks, in the thread, asyncio task or child process
    that runs its code: `ref` (and its `job_id`, `task`, `queue`, `attempt`,
    `execution_id`, `worker_id`), its arguments and metadata. After: `outcome` (as the
    code ended it: `succeeded`, `failed`, `cancelled`...), `exception` (what the code
    raised, if it did), `error` (its traceback text) and `will_retry` (the job runs again
    after this failure)."""

    ref: AttemptRef
    args: Mapping[str, Any]
    meta: Mapping[str, Any]
    max_retries: int
    outcome: Outcome | None = None
    exception: BaseException | None = None
    error: str | None = None
    will_retry: bool = False


@dataclass(frozen=True)
class CrashInfo(NamesAnAttempt):
    """One attempt that crashed, for the crash hooks: its worker or its process pool child
    died, or its lease expired (its worker froze or lost its host), so its code could not
    report its end. Run in the process that ended it: on that worker's maintenance
    thread, its completer thread (a process pool child that died) or its main thread (its
    startup reconciliation), possibly two at once: keep a hook quick and thread-safe.

    `ref` names the attempt (and its `job_id`, `task`, `queue`, `attempt`,
    `execution_id`, `worker_id`: the worker that held it, not the one running the hook);
    `crash` is the crash context stored with the attempt (`reason`, `detected_by`,
    `detected_at`, `last_heartbeat_at`, a child's `signal` and `exit_code`...), as
    `heartq jobs show` prints it. `status` is what became of the job: `queued` again
    (`will_retry`, after `retry_in` seconds), `dead` (`dead_reason`) or `cancelled` (its
    cancel was requested)."""

    ref: AttemptRef
    args: Mapping[str, Any]
    meta: Mapping[str, Any]
    started_at: datetime | None
    crash: Mapping[str, Any]
    status: JobStatus
    retry_in: float = 0.0
    dead_reason: str | None = None

    @property
    def detected_by(self) -> str:
        """How the crash was found: `liveness_lock`, `stale_worker`, `lease_expired`,
        `child_exit` or `reconciliation`."""
        return str(self.crash.get("detected_by", ""))

    @property
    def reason(self) -> str:
        """The crash's reason in words (`lease expired`, `child process killed by
        SIGKILL`...)."""
        return str(self.crash.get("reason", "crashed"))

    @property
    def will_retry(self) -> bool:
        """The job runs again after this crash."""
        return self.status is JobStatus.QUEUED


@dataclass(frozen=True)
class WorkerHookInfo:
    """A worker, for the worker hooks: run in its main process after it registered
    (`worker_start`) and after its last attempt ended, before it deregisters
    (`worker_stop`)."""

    worker_id: str
    name: str
    queues: Sequence[str]
    pool: str


class HookList(Generic[Subject]):
    """The hooks of one kind, in registration order; a hook's failure is told to `emit`."""

    def __init__(self, kind: str, emit: Emit) -> None:
        self.kind = kind
        self._emit = emit
        self._hooks: list[Hook[Subject]] = []

    def __call__(self, hook: Hook[Subject]) -> Hook[Subject]:
        """Register `hook` (usable as a decorator); returns it unchanged."""
        if not callable(hook):
            raise TypeError(f"a {self.kind} hook must be callable, got {hook!r}")
        self._hooks.append(hook)
        return hook

    def remove(self, hook: Hook[Subject]) -> None:
        """Unregister `hook` (its first registration): a test's hook, or the recorder of
        `heartq.testing`'s drain, for its own run only. Hooks already under way run their
        after parts; the list is replaced rather than changed in place, so an enqueue or an
        attempt starting meanwhile sees it whole, before or after. `ValueError` if it is
        not registered."""
        hooks = list(self._hooks)
        hooks.remove(hook)
        self._hooks = hooks

    def __bool__(self) -> bool:
        return bool(self._hooks)

    def __len__(self) -> int:
        return len(self._hooks)

    def around(self, subjects: Sequence[Subject]) -> contextlib.AbstractContextManager[None]:
        """Run each hook before for each subject, then the body, then each hook's after
        part in reverse order, whether the body raised or not. Never raises a hook's
        error; the body's exception passes through unchanged. Without hooks, nothing at
        all (the path of every enqueue and attempt)."""
        return self._around(subjects) if self._hooks else _NOTHING

    @contextlib.contextmanager
    def _around(self, subjects: Sequence[Subject]) -> Iterator[None]:
        started = [
            [(hook, generator) for hook in self._hooks if (generator := self._before(hook, s))]
            for s in subjects
        ]
        try:
            yield
        finally:
            for generators in started:
                for hook, generator in reversed(generators):
                    self._after(hook, generator)

    def run(self, subject: Subject) -> None:
        """Hooks that have only a before (a worker's start and stop): run each whole."""
        with self.around([subject]):
            pass

    def _before(self, hook: Hook[Subject], subject: Subject) -> Generator[None, None, None] | None:
        try:
            made = hook(subject)
            if inspect.isgenerator(made):
                next(made)
                return cast("Generator[None, None, None]", made)
        except StopIteration:
            self.failed(hook, "before", "the hook returned without yielding")
        except Exception as exc:  # noqa: BLE001 - a hook's error is logged, never the job's
            self.failed(hook, "before", repr(exc))
        return None

    def _after(self, hook: Hook[Subject], generator: Generator[None, None, None]) -> None:
        try:
            next(generator)
        except StopIteration:
            return
        except Exception as exc:  # noqa: BLE001 - a hook's error is logged, never the job's
            self.failed(hook, "after", repr(exc))
            return
        generator.close()
        self.failed(hook, "after", "the hook yielded more than once")

    def failed(self, hook: Callable[..., Any], stage: str, error: str) -> None:
        """Tell `hook_failed` of `hook` (or of what ran it) to the app's stream."""
        self._emit(
            events.HOOK_FAILED,
            logging.ERROR,
            kind=self.kind,
            hook=getattr(hook, "__qualname__", repr(hook)),
            stage=stage,
            error=error,
        )


class Hooks:
    """An app's hooks (`app.hooks`): `enqueue`, `attempt`, `crash`, `worker_start`,
    `worker_stop`, each a decorator that registers a hook. Register them where the app is
    made (at import of its module): a process pool's child imports that module, and so has
    them too. Made by the app's stream (`EventStream.hooks`), whose `emit` hears their
    failures."""

    def __init__(self, emit: Emit) -> None:
        self.enqueue: HookList[EnqueueInfo] = HookList("enqueue", emit)
        self.attempt: HookList[AttemptInfo] = HookList("attempt", emit)
        self.crash: HookList[CrashInfo] = HookList("crash", emit)
        self.worker_start: HookList[WorkerHookInfo] = HookList("worker_start", emit)
        self.worker_stop: HookList[WorkerHookInfo] = HookList("worker_stop", emit)


class EnqueueRun:
    """The jobs of one enqueue as the hooks left them (`jobs`, their `meta` applied), and
    where the store's answer goes (`stored`, kept in `ids` for what follows the hooks:
    the transport's wake-ups)."""

    def __init__(self, jobs: list[NewJob], infos: list[EnqueueInfo]) -> None:
        self.jobs = jobs
        self.infos = infos
        self.ids: list[str | None] = []

    def stored(self, ids: Sequence[str | None]) -> None:
        """Tell the hooks' after parts each job's id, in the order of `jobs` (None: not
        stored by this enqueue, a tick another worker's scheduler enqueued first)."""
        self.ids = list(ids)
        for info, job_id in zip(self.infos, ids, strict=False):  # no infos: no hooks
            info.job_id = job_id


@contextlib.contextmanager
def hooked_enqueue(
    hooks: HookList[EnqueueInfo],
    jobs: list[NewJob],
    args_list: Sequence[Mapping[str, Any]],
    *,
    limit: int,
) -> Iterator[EnqueueRun]:
    """Around the store's enqueue of `jobs` (made from `args_list`): each job's hooks run
    before (they may change its `meta`) and after (with its id, or the exception)."""
    if not hooks:
        yield EnqueueRun(jobs, [])
        return
    infos = [
        EnqueueInfo(
            task=job.task,
            args=args,
            queue=job.queue,
            meta=json.loads(job.meta_json) if job.meta_json else {},
        )
        for job, args in zip(jobs, args_list, strict=True)
    ]
    with hooks.around(infos):
        try:
            pairs = zip(jobs, infos, strict=True)
            yield EnqueueRun([_with_meta(hooks, job, info, limit) for job, info in pairs], infos)
        except BaseException as exc:
            for info in infos:
                info.exception = exc
            raise


def _with_meta(hooks: HookList[EnqueueInfo], job: NewJob, info: EnqueueInfo, limit: int) -> NewJob:
    """The job with the meta its hooks left; a meta they broke is logged and the job keeps
    the meta it had (a hook never costs a job)."""
    try:
        meta_json = payload.encode_meta(info.meta, limit=limit)
    except Exception as exc:  # noqa: BLE001 - a hook's error is logged, never the job's
        hooks.failed(_with_meta, "before", f"meta left unusable: {exc}")
        return job
    return job if meta_json == job.meta_json else dataclasses.replace(job, meta_json=meta_json)


def run_crash_hooks(hooks: HookList[CrashInfo], reclaimed: Sequence[Reclaimed]) -> None:
    """The crash hooks for each attempt of `reclaimed` that crashed, in order. Not for an
    attempt `interrupted` (its own worker gave it up when it lost the database: the job
    was not at fault, and the worker's attempt hooks still see its code end) nor for a job
    claimed ahead and never started (no attempt ran)."""
    if not hooks:
        return
    for job in reclaimed:
        if job.outcome is not Outcome.CRASHED:
            continue
        try:  # a crash that cannot be described is logged; the others are still told
            info = _crash_info(job)
        except Exception as exc:  # noqa: BLE001 - never the finder's error, nor the next crash's
            hooks.failed(run_crash_hooks, "before", f"job {job.job_id}: {exc!r}")
            continue
        hooks.run(info)


def _crash_info(job: Reclaimed) -> CrashInfo:
    args = payload.decode(job.args_json)
    meta = payload.decode(job.meta_json)
    return CrashInfo(
        job.ref,
        args=MappingProxyType(args if isinstance(args, dict) else {}),
        meta=MappingProxyType(meta if isinstance(meta, dict) else {}),
        started_at=utc(job.started_at),
        crash=MappingProxyType(job.crash),
        status=job.status,
        retry_in=job.retry_delay,
        dead_reason=job.dead_reason,
    )
