"""Drives the Django example from inside it: run as a subprocess in a copy of
docs/examples/django (Django's settings are process-global, so the test process never
sets Django up). Prints one JSON object.

    python django_client.py create    # migrate, POST /reports/, and a rolled-back create
                                      # (its task's job must roll back with it)
    python django_client.py show ID   # GET /reports/ID/
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Any


class RollBack(Exception):
    """Raised inside a transaction to roll it back."""


def main(argv: list[str]) -> dict[str, Any]:
    sys.path.insert(0, os.getcwd())  # the example project, as manage.py would see it
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import transaction
    from django.test import Client
    from reports.views import create_report

    if argv[0] == "create":
        call_command("migrate", verbosity=0)
        created = Client().post("/reports/", {"title": "t", "text": "one two three four"})
        # A report whose transaction rolls back: its job must never be enqueued.
        with contextlib.suppress(RollBack), transaction.atomic():
            create_report("rolled back", "never counted")
            raise RollBack
        return {"status": created.status_code, "body": created.json()}
    if argv[0] == "show":
        shown = Client().get(f"/reports/{argv[1]}/")
        return {
            "status": shown.status_code,
            "body": shown.json() if shown.status_code == 200 else None,
        }
    raise SystemExit(f"unknown step {argv[0]!r}")


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
