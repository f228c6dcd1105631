"""heartq: a job queue that loses no job and leaves none stuck.

Each running job is held on a lease its worker renews by heartbeat; a job whose lease
lapses is reclaimed with its crash context kept; every write of a worker is fenced by an
execution id; retries are bounded and the rest go to a dead-letter queue.
"""

import importlib as _importlib
import typing as _typing

from heartq.errors import (
    AlreadyEnqueued,
    BadArguments,
    Cancelled,
    ConfigError,
    DependencyNotFound,
    DuplicateJob,
    HeartqError,
    JobCancelled,
    JobDead,
    JobNotFound,
    LeaseLost,
    PayloadError,
    Permanent,
    ResultLost,
    ResultTimeout,
    Snooze,
    StoreBusy,
    StoreRefused,
    StoreUnavailable,
    TaskNotDeclared,
    TaskNotDeclaredWarning,
    UnknownTask,
)
from heartq.version import __version__

if _typing.TYPE_CHECKING:
    from heartq.app import App, Task, TaskDecorator
    from heartq.config import Settings
    from heartq.context import JobContext
    from heartq.event_stream import EventStream
    from heartq.events import Event
    from heartq.hooks import AttemptInfo, CrashInfo, EnqueueInfo, Hooks, WorkerHookInfo
    from heartq.lost_results import LostResult, is_lost_result
    from heartq.model import (
        AttemptRef,
        CancelResult,
        DependencyFailure,
        JobStatus,
        Outcome,
        Pipeline,
    )
    from heartq.pipelines import Chain, Group, Signature, chain, group
    from heartq.queue_controls import QueueControl
    from heartq.worker import Worker

_LAZY = {
    name: module
    for module, names in {
        "heartq.app": ["App", "Task", "TaskDecorator"],
        "heartq.config": ["Settings"],
        "heartq.context": ["JobContext"],
        "heartq.event_stream": ["EventStream"],
        "heartq.events": ["Event"],
        "heartq.hooks": ["AttemptInfo", "CrashInfo", "EnqueueInfo", "Hooks", "WorkerHookInfo"],
        "heartq.lost_results": ["LostResult", "is_lost_result"],
        "heartq.model": [
            "AttemptRef",
            "CancelResult",
            "DependencyFailure",
            "JobStatus",
            "Outcome",
            "Pipeline",
        ],
        "heartq.pipelines": ["Chain", "Group", "Signature", "chain", "group"],
        "heartq.queue_controls": ["QueueControl"],
        "heartq.worker": ["Worker"],
    }.items()
    for name in names
}
"""Public names imported on first use (`__getattr__`), all but the errors: a process that
only enqueues (a web app) does not load the worker's runtime, its maintenance services and
its transport; a process of the command line (`heartq.cli`, inside this package) does not
pay at start-up for the app and the model before its command asks for them."""


__all__ = [
    "AlreadyEnqueued",
    "App",
    "AttemptInfo",
    "AttemptRef",
    "BadArguments",
    "CancelResult",
    "Cancelled",
    "Chain",
    "ConfigError",
    "CrashInfo",
    "DependencyFailure",
    "DependencyNotFound",
    "DuplicateJob",
    "EnqueueInfo",
    "Event",
    "EventStream",
    "Group",
    "HeartqError",
    "Hooks",
    "JobCancelled",
    "JobContext",
    "JobDead",
    "JobNotFound",
    "JobStatus",
    "LeaseLost",
    "LostResult",
    "Outcome",
    "PayloadError",
    "Permanent",
    "Pipeline",
    "QueueControl",
    "ResultLost",
    "ResultTimeout",
    "Settings",
    "Signature",
    "Snooze",
    "StoreBusy",
    "StoreRefused",
    "StoreUnavailable",
    "Task",
    "TaskDecorator",
    "TaskNotDeclared",
    "TaskNotDeclaredWarning",
    "UnknownTask",
    "Worker",
    "WorkerHookInfo",
    "__version__",
    "chain",
    "group",
    "is_lost_result",
]


def __getattr__(name: str) -> _typing.Any:
    if name in _LAZY:
        value = getattr(_importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # once: the next lookup finds it without this hook
        return value
    if not name.startswith("_"):
        # A submodule reached as an attribute (`heartq.events.log_event` after `import
        # heartq`), as when this module imported them all at once.
        try:
            return _importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module 'heartq' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
