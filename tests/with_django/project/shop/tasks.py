"""The shop's tasks: those of Django's documentation on tasks (an email to users, the
same with the task's context, deferred and prioritised enqueues of them), an async one,
one that fails, one whose first attempt hangs until its worker is killed, one that
marks an order, and those that take heartq's newer options (retry waits stated outright,
uniqueness by arguments, a bound on snoozes). Written against Django's API only;
heartq's options as `@task` keywords (Django 6.1 and the backport pass them to the
backend) or the backend's OPTIONS (`site_settings.TASKS`)."""

import asyncio
import time
from pathlib import Path

from django.core.mail import send_mail
from django.db.models import F

try:
    from django.tasks import task
except ImportError:  # the django-tasks backport, before Django 6
    from django_tasks import task

from shop.models import Order


@task
def email_users(emails, subject, message):
    return send_mail(subject=subject, message=message, from_email=None, recipient_list=emails)


@task(takes_context=True)
def email_users_with_context(context, emails, subject, message):
    sent = send_mail(subject=subject, message=message, from_email=None, recipient_list=emails)
    return {"attempt": context.attempt, "id": context.task_result.id, "sent": sent}


@task
async def count_words(text):
    await asyncio.sleep(0)
    return len(text.split())


@task(queue_name="ordered")
def record(label):
    return label


@task(max_retries=1, retry_backoff=0)
def refund(order_id):
    raise LookupError(f"no payment for order {order_id}")


@task
def charge(order_id):
    """No retry: `max_retries=0` is the backend's OPTIONS for this task (site_settings)."""
    raise ValueError(f"card declined for order {order_id}")


@task(takes_context=True, queue_name="crashy")
def slow_once(context, marker):
    """The first attempt marks that it started (its worker's id, written whole before the
    file appears: a test that saw the file while it was being written read it empty),
    then hangs (its worker is SIGKILLed); the next one returns at once."""
    if context.attempt == 1:
        written = Path(f"{marker}.part")
        written.write_text(context.task_result.worker_ids[-1])
        written.rename(marker)
        time.sleep(120)
    context.heartq.heartbeat(progress=1.0, stage="done")  # heartq's own JobContext
    return {"attempt": context.attempt, "heartq_attempt": context.heartq.attempt}


@task
def mark_processed(order_id):
    Order.objects.filter(pk=order_id).update(processed=F("processed") + 1)
    return Order.objects.get(pk=order_id).processed


def _note_attempt(log, attempt):
    """One line per attempt in `log`: its number and when it started."""
    with open(log, "a") as file:
        file.write(f"{attempt} {time.time()}\n")


@task(takes_context=True, max_retries=2, retry_intervals=[0.3, 2.0])
def flaky(context, log):
    """Fails every attempt, its retries after the waits listed."""
    _note_attempt(log, context.attempt)
    raise OSError("the share is not mounted")


@task(takes_context=True, max_retries=1)
def paced(context, log):
    """Fails every attempt; its wait before a retry is `site_settings.retry_after`'s,
    given by the backend's OPTIONS."""
    _note_attempt(log, context.attempt)
    raise TimeoutError("upstream slow")


@task(queue_name="parked", unique=True)
def refresh(account):
    """Keyed by its arguments: one queued job per account."""
    return account


@task(queue_name="parked")
def stamp(label):
    return label


@task(queue_name="parked", expires=0.5)
def stamp_soon(label):
    """Its jobs must start within half a second of their enqueue."""
    return label


@task(max_snoozes=1, max_retries=0)
def too_early(label):
    """Always too early: its first snooze is free, its second a failed attempt."""
    from heartq import Snooze

    raise Snooze(0.1, reason=f"{label} not there yet")
