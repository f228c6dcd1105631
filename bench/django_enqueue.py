"""An enqueue through Django's tasks framework against heartq's own, in one run: what the
backend (heartq.contrib.django) adds to each task enqueued.

Django is set up in this process (`settings.configure`) with heartq's backend on a queue
in Django's own database: a SQLite file, or with `--postgres URL` a PostgreSQL database
too (heartq's tables in a schema of their own, dropped after). Each variant enqueues
`--jobs` jobs of a task that does nothing, one call at a time; the variants run round by
round in rotating order, on the same queue:

- `heartq`: `Task.enqueue()` of a heartq task (`@app.task`);
- `django`: `Task.enqueue()` of a Django task (`@task`), through the backend: the same
  job, plus Django's checks, the backend's options, the `TaskResult` and its signal;
- `heartq in atomic()`, `django in atomic()`: each call inside its own
  `transaction.atomic()`, the job written on Django's connection (heartq's own
  `connection=` enqueue, against the backend's, which does that by itself).

Run (the project's environment: Django 4.2 and the django-tasks backport; Django 6.1
runs the same from `.venv/django-6.1`):

    .venv/bin/python -m bench.django_enqueue --jobs 1000 --rounds 5 --postgres URL

Figures are printed (median µs a call, wall and CPU, and the backend's overhead a task:
the median of each round's difference), never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

VARIANTS = ("heartq", "django", "heartq in atomic()", "django in atomic()")


def noop() -> None:
    """The task of every variant: nothing to run, only its enqueue is timed."""


def django_databases(sqlite_path: Path, postgres: str | None) -> dict[str, Any]:
    databases: dict[str, Any] = {
        "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(sqlite_path)}
    }
    if postgres is not None:
        parts = urlsplit(postgres)
        databases["pg"] = {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": parts.path.lstrip("/"),
            "USER": parts.username or "",
            "PASSWORD": parts.password or "",
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
        }
    return databases


def set_up(sqlite_path: Path, postgres: str | None, schema: str) -> None:
    import django
    from django.conf import settings

    backends: dict[str, dict[str, Any]] = {
        "default": {"BACKEND": "heartq.contrib.django.HeartqBackend"}
    }
    if postgres is not None:
        backends["pg"] = {
            "BACKEND": "heartq.contrib.django.HeartqBackend",
            "OPTIONS": {"DATABASE": "pg", "SCHEMA": schema},
        }
    backport = django.VERSION < (6, 0)
    settings.configure(
        INSTALLED_APPS=[*(["django_tasks"] if backport else []), "heartq.contrib.django"],
        DATABASES=django_databases(sqlite_path, postgres),
        TASKS=backends,
        USE_TZ=True,
    )
    django.setup()


def variants(alias: str) -> dict[str, Callable[[], None]]:
    """Each variant's one call, on the backend `alias`'s queue."""
    from django.db import connections, transaction

    from heartq.contrib.django.compat import task_backends
    from heartq.contrib.django.task import HeartqTask

    backend = task_backends[alias]
    django_task = HeartqTask(func=noop, backend=alias, priority=0, queue_name="default")
    app = backend.queue.ready_app()
    app.migrate()
    heartq_task = app.task(name="bench.heartq_noop")(noop)
    connection = connections[backend.queue.database]

    def heartq_in_atomic() -> None:
        with transaction.atomic(using=connection.alias):
            heartq_task.options(connection=connection.connection).enqueue()

    def django_in_atomic() -> None:
        with transaction.atomic(using=connection.alias):
            django_task.enqueue()

    return {
        "heartq": heartq_task.enqueue,
        "django": django_task.enqueue,
        "heartq in atomic()": heartq_in_atomic,
        "django in atomic()": django_in_atomic,
    }


def timed(call: Callable[[], None], jobs: int) -> tuple[float, float]:
    """µs a call over `jobs` calls: wall, and this process's CPU (what is left once the
    waits for the database are taken out: the Python the backend adds)."""
    started, cpu = time.perf_counter(), time.process_time()
    for _ in range(jobs):
        call()
    return (time.perf_counter() - started) / jobs * 1e6, (time.process_time() - cpu) / jobs * 1e6


def measure(alias: str, jobs: int, rounds: int) -> dict[str, list[tuple[float, float]]]:
    calls = variants(alias)
    for call in calls.values():  # warm: first connections, migrations, plans
        timed(call, min(jobs, 20))
    found: dict[str, list[tuple[float, float]]] = {name: [] for name in VARIANTS}
    for n in range(rounds):
        order = VARIANTS[n % len(VARIANTS):] + VARIANTS[: n % len(VARIANTS)]
        for name in order:
            found[name].append(timed(calls[name], jobs))
    return found


def report(title: str, found: dict[str, list[tuple[float, float]]]) -> str:
    """A table: each variant's median µs a call (wall, min-max, CPU), and the backend's
    overhead a task over heartq's own call (the median of the rounds' differences)."""
    lines = [title, "", "| variant | µs a call | min-max | CPU µs | overhead a task (wall, CPU) |",
             "| --- | --- | --- | --- | --- |"]  # fmt: skip
    for name in VARIANTS:
        walls, cpus = zip(*found[name], strict=True)
        extra = ""
        if name.startswith("django"):
            base = found[name.replace("django", "heartq")]
            wall = statistics.median(d[0] - h[0] for d, h in zip(found[name], base, strict=True))
            cpu = statistics.median(d[1] - h[1] for d, h in zip(found[name], base, strict=True))
            extra = f"{wall:+.0f} µs, {cpu:+.0f} µs"
        wall_us, cpu_us = statistics.median(walls), statistics.median(cpus)
        spread = f"{min(walls):.0f}-{max(walls):.0f}"
        lines.append(f"| {name} | {wall_us:.0f} | {spread} | {cpu_us:.0f} | {extra} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000, help="calls a variant a round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--postgres", default=None, metavar="URL",
                        help="also on this PostgreSQL database (a schema of its own)")  # fmt: skip
    options = parser.parse_args()
    schema = f"bench_django_{uuid.uuid4().hex[:12]}"
    with tempfile.TemporaryDirectory() as scratch:
        set_up(Path(scratch) / "django.sqlite3", options.postgres, schema)
        import django

        print(f"Django {django.get_version()}, {options.jobs} calls x {options.rounds} rounds\n")
        print(report("SQLite (FULL)", measure("default", options.jobs, options.rounds)))
        if options.postgres is not None:
            try:
                print(f"\nscratch schema {schema}")
                print(report("PostgreSQL", measure("pg", options.jobs, options.rounds)))
            finally:
                drop_schema(options.postgres, schema)


def drop_schema(url: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


if __name__ == "__main__":
    main()
