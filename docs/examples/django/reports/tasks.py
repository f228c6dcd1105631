"""The heartq app and tasks of the Django example. They use the ORM, so a worker runs
them inside Django: `python manage.py run_heartq_worker`."""

from __future__ import annotations

import heartq
from django.conf import settings
from django.db import close_old_connections

from reports.models import Report

app = heartq.App(settings.HEARTQ_URL)


@app.task(max_retries=3)
def count_words(report_id: int) -> int:
    """Fill in the report's word count. The job carries the row's id, not its data:
    the worker reads the row as committed."""
    close_old_connections()  # what Django does per request: a worker thread lives long
    try:
        report = Report.objects.get(pk=report_id)
    except Report.DoesNotExist:
        raise heartq.Permanent(f"report {report_id} does not exist") from None  # no retry
    report.words = len(report.text.split())
    report.save(update_fields=["words"])
    return report.words
