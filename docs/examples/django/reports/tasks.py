"""The example's task, written against Django's tasks framework: heartq runs it, in
`python manage.py heartq_worker`."""

from __future__ import annotations

import heartq

try:
    from django.tasks import task
except ImportError:  # before Django 6.0: the django-tasks backport
    from django_tasks import task

from reports.models import Report


@task(max_retries=3)  # a heartq option, as one of @task's keywords
def count_words(report_id: int) -> int:
    """Fill in the report's word count. The job carries the row's id, not its data:
    the worker reads the row as committed."""
    try:
        report = Report.objects.get(pk=report_id)
    except Report.DoesNotExist:
        raise heartq.Permanent(f"report {report_id} does not exist") from None  # no retry
    report.words = len(report.text.split())
    report.save(update_fields=["words"])
    return report.words
