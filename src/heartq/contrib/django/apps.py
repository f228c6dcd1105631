"""The Django app `heartq.contrib.django` (label `heartq`): `manage.py heartq_worker`,
and heartq's schema created by `manage.py migrate`.

heartq's tables are not Django models: they are heartq's own schema, migrated by heartq
(`App.migrate`, as `heartq migrate` does). After Django's migrations of a database, the
queue of each heartq backend that lives there (or waits for its commits) is migrated too,
so one `manage.py migrate` sets up both. A SQLite database in memory (Django's test
runner's default) holds no queue: it is left alone.
"""

from __future__ import annotations

import sys
from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class HeartqConfig(AppConfig):  # type: ignore[misc]  # Django is untyped
    name = "heartq.contrib.django"
    label = "heartq"
    verbose_name = "heartq"

    def ready(self) -> None:
        post_migrate.connect(migrate_queues, sender=self)


def migrate_queues(using: str, verbosity: int = 1, **kwargs: Any) -> None:
    """After `manage.py migrate` of the database `using`: heartq's schema of every heartq
    backend whose queue lives there, or waits for its commits."""
    from django.core.exceptions import ImproperlyConfigured

    from heartq.contrib.django.backend import HeartqBackend
    from heartq.contrib.django.compat import task_backends
    from heartq.store import redact

    out = kwargs.get("stdout") or sys.stdout
    for backend in task_backends.all():
        if not isinstance(backend, HeartqBackend) or backend.queue.database != using:
            continue
        try:
            app = backend.queue.ready_app()
        except ImproperlyConfigured as exc:  # SQLite in memory: no queue to make there
            if verbosity >= 2:
                out.write(f"  heartq: TASKS[{backend.alias!r}] skipped: {exc}\n")
            continue
        version = app.migrate()
        if verbosity >= 1:
            out.write(
                f"  heartq: TASKS[{backend.alias!r}] queue at {redact(app.url)}: "
                f"schema version {version}\n"
            )
