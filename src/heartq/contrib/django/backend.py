"""`HeartqBackend`: Django's task backend contract, run by heartq.

    TASKS = {"default": {"BACKEND": "heartq.contrib.django.HeartqBackend"}}

Every capability flag is true: `run_after` (a job due then), `async def` tasks (run in an
event loop per attempt, or the worker's one with `--pool async`), results from any
process (`get_result`, read from the stored job), priorities (Django's -100..100 is
heartq's priority as it is: both run higher first, and Django's range lies within
heartq's 32-bit one, so a Django task at 5 and a heartq task at 5 are equal).

An enqueue returns Django's `TaskResult`, whose id is the heartq job's id; where the job
is written (in the caller's transaction, at its commit, at once) is
`heartq.contrib.django.queue`'s; how a job reads as a `TaskResult`,
`heartq.contrib.django.results`'.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from django.apps import apps
from django.core import checks
from django.utils import timezone

from heartq.contrib.django import results
from heartq.contrib.django.compat import (
    BaseTaskBackend,
    InvalidTask,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_enqueued,
)
from heartq.contrib.django.queue import TaskQueue, queue_for
from heartq.contrib.django.task import HeartqTask
from heartq.errors import ConfigError, JobNotFound

APP_LABEL = "heartq.contrib.django"
"""The Django app to install for `manage.py heartq_worker` and `manage.py migrate`."""


class HeartqBackend(BaseTaskBackend):  # type: ignore[misc]  # Django's base is untyped
    """Django's task backend on a heartq queue (see the module's docstring)."""

    task_class = HeartqTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: Mapping[str, Any]) -> None:
        super().__init__(alias, params)
        self.queue: TaskQueue = queue_for(alias, params)

    def validate_task(self, task: Any) -> None:
        """Django's checks, then heartq's: a task of another class than the backend's
        cannot carry heartq's options, and a task is registered with heartq (its options
        checked) the first time it is seen, where it is defined."""
        super().validate_task(task)
        if not isinstance(task, HeartqTask):
            raise InvalidTask(
                f"task {task.module_path!r} is a {type(task).__name__}: the heartq backend "
                f"runs its own task class ({HeartqTask.__module__}.HeartqTask), which "
                "@task makes for it"
            )
        self.queue.register(task)

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        self.validate_task(task)
        registered = self.queue.register(task)
        job_args = registered.bind(*args, **kwargs)
        positional = list(registered.signature.parameters)[: len(args)]
        options = self.queue.enqueue_options(task, registered, positional)
        job_id, pending = self.queue.enqueue(registered.name, job_args, options)
        result = TaskResult(
            task=task,
            id=job_id,
            status=TaskResultStatus.READY,
            enqueued_at=timezone.now(),
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=list(args),
            kwargs=dict(kwargs),
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        if pending is not None:
            pending.results.append(result)
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> Any:
        try:
            job = self.queue.ready_app().get_job(str(result_id))
        except (JobNotFound, ConfigError):
            raise TaskResultDoesNotExist(result_id) from None
        return results.task_result(job, self.alias)

    async def aget_result(self, result_id: str) -> Any:
        """`get_result` off the event loop (it needs none of Django's connections)."""
        return await asyncio.to_thread(self.get_result, result_id)

    def check(self, **kwargs: Any) -> list[Any]:
        """Django's system checks: the app that runs the worker and creates the schema."""
        found = list(super().check(**kwargs))
        if not apps.is_installed(APP_LABEL):
            found.append(
                checks.Warning(
                    f"TASKS[{self.alias!r}] is a heartq backend, but {APP_LABEL!r} is not "
                    "in INSTALLED_APPS: no `manage.py heartq_worker`, and `manage.py "
                    "migrate` does not create heartq's schema",
                    hint=f"Add {APP_LABEL!r} to INSTALLED_APPS.",
                    id="heartq.W001",
                )
            )
        return found
