"""`python manage.py run_heartq_worker`: a heartq worker with Django set up, so tasks
can use the ORM and settings (plain `heartq worker reports.tasks:app` would import the
tasks before Django is configured)."""

from __future__ import annotations

from typing import Any

import heartq
from django.core.management.base import BaseCommand, CommandParser

from reports.tasks import app


class Command(BaseCommand):
    help = "Run a heartq worker for reports.tasks (SIGTERM: finish running jobs, then exit)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--concurrency", type=int, default=4)
        parser.add_argument("--queues", help="comma-separated; default: the tasks' queues")
        parser.add_argument("--burst", action="store_true", help="exit once nothing is left")

    def handle(self, *args: Any, **options: Any) -> None:
        queues = options["queues"].split(",") if options["queues"] else None
        worker = heartq.Worker(app, queues=queues, concurrency=options["concurrency"])
        worker.install_signal_handlers()
        worker.run(burst=options["burst"])
