"""Every exception heartq raises, in one place.

Hierarchy::

    HeartqError
    ├── ConfigError          bad settings or URL (also a ValueError)
    ├── PayloadError         arguments that are not JSON or too large (also a ValueError)
    ├── UnknownTask          a worker was handed a task it does not know
    ├── JobNotFound          no job with that id (also a LookupError)
    ├── DuplicateJob         a job id given at enqueue already exists
    ├── StoreUnavailable     the database cannot be opened, reached or written
    │   └── StoreBusy        the database stayed locked past the busy timeout
    ├── LeaseLost            this attempt no longer owns its job (fencing refused a write)
    └── Cancelled            a cancel was requested for the running job

    Permanent                raised by task code: skip retries, go to the dead-letter queue

`Permanent` is deliberately not a `HeartqError`: it is the user's signal to heartq,
not heartq's to the user.
"""

from __future__ import annotations


class HeartqError(Exception):
    """Base class of the errors heartq raises."""


class ConfigError(HeartqError, ValueError):
    """A setting, URL or option is invalid; the message says which and why."""


class PayloadError(HeartqError, ValueError):
    """Job arguments (or a result/checkpoint) cannot be stored: not JSON, or too large."""


class UnknownTask(HeartqError):
    """A job names a task that the worker's app has not registered. The worker fails the
    attempt with this error's text (the job is retried: a newer deploy may know it)."""

    def __init__(self, task: str) -> None:
        super().__init__(
            f"task {task!r} is not registered in this worker's app "
            "(deploy the code that defines it, or cancel the job)"
        )
        self.task = task


class JobNotFound(HeartqError, LookupError):
    """No job has the given id."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"no job with id {job_id!r}")
        self.job_id = job_id


class DuplicateJob(HeartqError):
    """A job id given at enqueue already exists; nothing of that batch was stored."""


class StoreUnavailable(HeartqError):
    """The database cannot be opened, reached or written (missing directory, read-only, down)."""


class StoreBusy(StoreUnavailable):
    """The database stayed locked by other writers for longer than the busy timeout."""


class LeaseLost(HeartqError):
    """This attempt no longer owns its job: it was reclaimed and another execution may hold it.

    Raised by fenced writes (`ctx.heartbeat`, checkpoint saves) whose `(job_id, execution_id)`
    no longer matches a running job. Nothing of the stale attempt is stored.
    """

    def __init__(self, job_id: str, execution_id: int) -> None:
        super().__init__(f"lease lost for job {job_id} (execution {execution_id})")
        self.job_id = job_id
        self.execution_id = execution_id


class Cancelled(HeartqError):
    """A cancel was requested for this job; the task should stop."""


class Permanent(Exception):
    """Raise (or subclass) in a task to fail the job at once, with no retry."""
