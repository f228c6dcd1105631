"""The shop's views: each enqueues a task through Django's API and answers its result's
id (`TaskResult.id`)."""

from datetime import timedelta

from django.db import transaction
from django.http import HttpResponse, JsonResponse
from django.utils import timezone

from shop import tasks
from shop.models import Order

ENQUEUED_BEFORE_FAILING = []
"""The ids enqueued by views that then failed (the test asks the backend for them)."""


def answer(result, **more):
    return JsonResponse({"id": result.id, "status": str(result.status), **more}, status=202)


def email(request):
    emails = request.POST.getlist("to")
    return answer(tasks.email_users.enqueue(emails, subject="Hello", message="Welcome!"))


def email_later(request):
    run_after = timezone.now() + timedelta(seconds=float(request.POST["seconds"]))
    result = tasks.email_users.using(run_after=run_after).enqueue(
        emails=request.POST.getlist("to"), subject="Later", message="Deferred."
    )
    return answer(result, run_after=run_after.isoformat())


def email_with_context(request):
    result = tasks.email_users_with_context.enqueue(
        emails=request.POST.getlist("to"), subject="Context", message="With context."
    )
    return answer(result)


async def words(request):
    return answer(await tasks.count_words.aenqueue(request.POST["text"]))


def ordered(request, priority):
    return answer(tasks.record.using(priority=int(priority)).enqueue(request.POST["label"]))


def fail(request):
    return answer(tasks.refund.enqueue(order_id=int(request.POST["order"])))


def decline(request):
    return answer(tasks.charge.enqueue(int(request.POST["order"])))


def crash(request):
    return answer(tasks.slow_once.enqueue(marker=request.POST["marker"]))


@transaction.atomic
def create_order(request):
    order = Order.objects.create(item=request.POST["item"])
    return answer(tasks.mark_processed.enqueue(order.pk), order=order.pk)


@transaction.atomic
def create_order_then_fail(request):
    order = Order.objects.create(item=request.POST["item"])
    ENQUEUED_BEFORE_FAILING.append(tasks.mark_processed.enqueue(order.pk).id)
    raise RuntimeError("the payment provider is down")


def login_page(request):
    return HttpResponse("log in here")
