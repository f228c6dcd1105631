"""The heartq backends' apps, by alias, as `heartq worker` loads an APP.

`manage.py heartq_worker` runs `heartq worker heartq.contrib.django.worker:ALIAS` inside
manage.py, with Django set up; `heartq worker heartq.contrib.django.worker:default` runs
the same where `DJANGO_SETTINGS_MODULE` is set. The app is the backend's own, with every
task of the project registered on it: each installed app's `tasks` module is imported
(Django's `autodiscover_modules`, as the admin finds `admin` modules), then the modules
the backend's `OPTIONS['MODULES']` names. A process-pool child (`--pool process`)
imports the same name, which sets Django up in it first.
"""

from __future__ import annotations

import importlib
from typing import Any

from heartq.app import App
from heartq.errors import ConfigError

TASK_MODULE = "tasks"
"""The module of each installed app that is imported for its tasks."""


def __getattr__(alias: str) -> App:
    if alias.startswith("__"):
        raise AttributeError(alias)
    return app_for(alias)


def app_for(alias: str) -> App:
    """The app of the heartq backend `alias` of `TASKS`, its tasks found, pointed at its
    queue. `ConfigError` (one line) for an alias that is not a heartq backend."""
    _set_up_django()
    from django.utils.module_loading import autodiscover_modules

    from heartq.contrib.django.backend import HeartqBackend
    from heartq.contrib.django.compat import InvalidTaskBackend, task_backends

    try:
        backend = task_backends[alias]
    except InvalidTaskBackend as exc:
        raise ConfigError(f"no task backend {alias!r}: {exc}") from None
    if not isinstance(backend, HeartqBackend):
        raise ConfigError(
            f"TASKS[{alias!r}] is {type(backend).__module__}.{type(backend).__name__}, "
            "not heartq.contrib.django.HeartqBackend"
        )
    autodiscover_modules(TASK_MODULE)
    for module in backend.queue.modules:
        importlib.import_module(module)
    return backend.queue.ready_app()


def queues_for(alias: str) -> list[str]:
    """The queues a worker of `alias` claims from unless told: the backend's `QUEUES`
    (Django's list of the queues its tasks may use) and its tasks' own."""
    app = app_for(alias)
    from heartq.contrib.django.compat import task_backends

    allowed: Any = task_backends[alias].queues
    return sorted({*allowed, *(task.queue for task in app.tasks.values())} or {"default"})


def _set_up_django() -> None:
    """`django.setup()` unless done (manage.py did it; a process-pool child did not)."""
    from django.apps import apps

    if not apps.ready:
        import django

        django.setup()
