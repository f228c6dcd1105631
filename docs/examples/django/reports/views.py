"""Create a report (its task enqueued in the same transaction); show a report and its
task's status."""

from __future__ import annotations

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.http import require_GET, require_POST

from reports.models import Report
from reports.tasks import count_words


def create_report(title: str, text: str) -> Report:
    """Store a report and enqueue its task, in one transaction: the job is written on
    Django's connection, so it exists if and only if the report does, and no worker
    sees it before the report is committed."""
    with transaction.atomic():
        report = Report.objects.create(title=title, text=text)
        report.task_id = count_words.enqueue(report.pk).id
        report.save(update_fields=["task_id"])
    return report


@require_POST
def new_report(request: HttpRequest) -> JsonResponse:
    """POST title and text: 202 with the report's id and its task's."""
    report = create_report(request.POST["title"], request.POST.get("text", ""))
    return JsonResponse({"id": report.pk, "task": report.task_id}, status=202)


@require_GET
def show_report(request: HttpRequest, pk: int) -> JsonResponse:
    """The report, and its task's status as Django reports it (READY, RUNNING,
    SUCCESSFUL, FAILED)."""
    report = get_object_or_404(Report, pk=pk)
    result = count_words.get_result(report.task_id)
    return JsonResponse(
        {
            "id": report.pk,
            "title": report.title,
            "words": report.words,
            "task": {"status": result.status, "attempts": result.attempts},
        }
    )
