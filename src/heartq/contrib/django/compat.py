"""Which tasks framework the backend serves: Django's own `django.tasks` (Django 6.0 and
later), else the `django-tasks` backport (`django_tasks`, Django 4.2 and later). Both
define the same contract under the same names, but two exceptions the backport names
with an `Error` suffix (`InvalidTaskError`, `InvalidTaskBackendError`); everything the
backend uses of either is named here once, as Django 6 names it.

The names are typed `Any`: Django ships no type hints, and the backport's are not
Django's; the backend's own code is typed around them.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from django.core.exceptions import ImproperlyConfigured


def _framework() -> str:
    """The module path of the framework in use: `django.tasks` where Django has it."""
    if importlib.util.find_spec("django.tasks") is not None:
        return "django.tasks"
    if importlib.util.find_spec("django_tasks") is not None:
        return "django_tasks"
    raise ImproperlyConfigured(
        "heartq's task backend needs Django 6.0 or later (django.tasks), or the "
        "django-tasks backport on an older Django: pip install django-tasks"
    )


FRAMEWORK = _framework()
"""`django.tasks` or `django_tasks`."""

_base = importlib.import_module(f"{FRAMEWORK}.base")
_backends = importlib.import_module(f"{FRAMEWORK}.backends.base")
_exceptions = importlib.import_module(f"{FRAMEWORK}.exceptions")
_signals = importlib.import_module(f"{FRAMEWORK}.signals")

task_backends: Any = importlib.import_module(FRAMEWORK).task_backends
"""The framework's handler of the `TASKS` setting's backends, by alias."""
Task: Any = _base.Task
TaskResult: Any = _base.TaskResult
TaskResultStatus: Any = _base.TaskResultStatus
TaskError: Any = _base.TaskError
TaskContext: Any = _base.TaskContext
TASK_MIN_PRIORITY: int = _base.TASK_MIN_PRIORITY
TASK_MAX_PRIORITY: int = _base.TASK_MAX_PRIORITY
BaseTaskBackend: Any = _backends.BaseTaskBackend
InvalidTask: type[Exception] = getattr(_exceptions, "InvalidTask", None) or (
    _exceptions.InvalidTaskError
)
InvalidTaskBackend: type[Exception] = getattr(_exceptions, "InvalidTaskBackend", None) or (
    _exceptions.InvalidTaskBackendError
)
TaskResultDoesNotExist: type[Exception] = _exceptions.TaskResultDoesNotExist
task_enqueued: Any = _signals.task_enqueued
task_started: Any = _signals.task_started
task_finished: Any = _signals.task_finished
