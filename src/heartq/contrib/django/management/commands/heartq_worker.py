"""`manage.py heartq_worker`: `heartq worker` for a heartq task backend, inside manage.py
(settings loaded, the tasks of `INSTALLED_APPS` found: `heartq.contrib.django.worker`).

It takes every option of `heartq worker` (`--concurrency`, `--queues`, `--pool`,
`--burst`, `--heartbeat-interval`, ...), parsed by the same code with the same help and
errors, and `--backend ALIAS` (`default`); the queue and the tasks come from the
backend, so there is no APP to name. Without `--queues` it claims from the backend's
`QUEUES` and its tasks' queues.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from django.core.management.base import BaseCommand

from heartq.cli.main import run
from heartq.cli.worker_cmd import worker_command

DJANGO_OPTIONS = {"--settings": True, "--pythonpath": True, "--traceback": False}
"""manage.py's own options (read by manage.py before the command), and whether each
takes a value: left out of what the worker parses."""


def _heartq_worker(backend: str, **options: Any) -> None:
    from heartq.contrib.django.worker import queues_for

    context = click.get_current_context()
    if options["queues"] is None:
        options["queues"] = queues_for(backend)
    ref = f"heartq.contrib.django.worker:{backend}"
    context.invoke(worker_command.callback, app_ref=ref, **options)  # type: ignore[arg-type]


command = click.Command(
    "heartq_worker",
    callback=_heartq_worker,
    params=[
        click.Option(["--backend"], default="default", show_default=True,
                     help="The heartq backend of TASKS whose tasks to run."),
        *(p for p in worker_command.params if p.name != "app_ref"),
    ],
    help="Run a heartq worker for a heartq task backend of TASKS: the options of `heartq "
    "worker` (docs/INTERFACE.md#command-line); the tasks are those of the installed apps' "
    "tasks modules.",
)  # fmt: skip


def without_django_options(args: list[str]) -> list[str]:
    """The command's arguments, without those manage.py read itself (`--settings X`,
    `--settings=X`, `--pythonpath X`, `--traceback`)."""
    kept, skip = [], False
    for arg in args:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in DJANGO_OPTIONS:
            skip = DJANGO_OPTIONS[name] and "=" not in arg
            continue
        kept.append(arg)
    return kept


class Command(BaseCommand):  # type: ignore[misc]  # Django is untyped
    help = command.help or ""

    def run_from_argv(self, argv: list[str]) -> None:
        """`manage.py heartq_worker ARGS`: ARGS parsed as `heartq worker` parses its own
        (click), not by Django's parser; `--debug` shows tracebacks, as for `heartq`."""
        args = without_django_options(argv[2:])
        debug = "--debug" in args
        args = [arg for arg in args if arg != "--debug"]
        run(command, args, prog_name=f"{Path(argv[0]).name} {argv[1]}", debug=debug)

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("worker_args", nargs="*", help="heartq worker's options")

    def handle(self, *args: Any, **options: Any) -> None:
        """`call_command("heartq_worker", worker_args=["--burst"])`: errors are raised,
        as from any command called in a program."""
        command.main(list(options["worker_args"]), "heartq_worker", standalone_mode=False)
