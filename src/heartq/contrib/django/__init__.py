"""heartq behind Django's own tasks framework (`django.tasks`, Django 6.0 and later, and
the `django-tasks` backport on older Django): one setting, and `@task` code runs on
heartq's workers, its jobs committed with the view's transaction.

    TASKS = {"default": {"BACKEND": "heartq.contrib.django.HeartqBackend"}}
    INSTALLED_APPS = [..., "heartq.contrib.django"]   # heartq_worker, migrate

- `backend`: `HeartqBackend`, the contract (enqueue, results, capability flags);
- `task`: `HeartqTask`, the backend's task class (heartq's options in `@task(...)`);
- `queue`: one alias's heartq app, and where each enqueue is written;
- `results`: a stored job as Django's `TaskResult`;
- `runner`: what heartq runs for a Django task (context, signals, connections);
- `worker`: the backends' apps for `heartq worker` and `manage.py heartq_worker`;
- `apps`: the Django app (`manage.py migrate` creates heartq's schema);
- `views`, `urls`: the dashboard behind Django's staff login;
- `testing`: a fresh queue per test, from Django's test cases and pytest-django.

docs/INTEGRATIONS.md#django describes it all. Nothing here is imported by `heartq`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["HeartqBackend", "HeartqTask"]


def __getattr__(name: str) -> Any:
    """`HeartqBackend` and `HeartqTask`, imported when first named: Django imports this
    package as an app before its settings may be read by the backend's modules."""
    if name == "HeartqBackend":
        from heartq.contrib.django.backend import HeartqBackend

        return HeartqBackend
    if name == "HeartqTask":
        from heartq.contrib.django.task import HeartqTask

        return HeartqTask
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
