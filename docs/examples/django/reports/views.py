"""Create a report (and enqueue its job once the row is committed); show a report."""

from __future__ import annotations

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.http import require_GET, require_POST

from reports.models import Report
from reports.tasks import count_words


def create_report(title: str, text: str) -> Report:
    """Store a report and queue its job. The enqueue is its own transaction, so it is
    deferred to the commit: a job never names a row that rolled back, and never runs
    before its row is visible to the worker."""
    with transaction.atomic():
        report = Report.objects.create(title=title, text=text)
        transaction.on_commit(lambda: count_words.enqueue(report_id=report.pk))
    return report


@require_POST
def new_report(request: HttpRequest) -> JsonResponse:
    """POST title and text: 202 with the report's id; its job is queued at the commit."""
    report = create_report(request.POST["title"], request.POST.get("text", ""))
    return JsonResponse({"id": report.pk}, status=202)


@require_GET
def show_report(request: HttpRequest, pk: int) -> JsonResponse:
    """The report; `done` once its job has filled in the word count."""
    report = get_object_or_404(Report, pk=pk)
    return JsonResponse(
        {
            "id": report.pk,
            "title": report.title,
            "words": report.words,
            "done": report.words is not None,
        }
    )
