"""Drives the test project through Django's API, inside a process of its own (Django's
settings are process-global, and Django 6 runs under another Python than the suite's).

The test harness (tests/with_django/harness.py) starts it once per site and sends it one
JSON object per line, `{"op": NAME, "args": {...}}`; it answers one line each,
`{"ok": VALUE}` or `{"error": "Type: message", "traceback": ...}`. Answers go to the
standard output it started with; anything else printed goes to stderr.

Everything here uses Django's API only: the test client for views, `TaskResult`s from
the backends (`get_result`, `refresh`), `transaction.atomic`, the ORM.
"""

import asyncio
import json
import os
import re
import sys
import time
import traceback
import types

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "site_settings")

import django

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.db import transaction  # noqa: E402
from django.test import Client  # noqa: E402

try:
    from django.tasks import task_backends
    from django.tasks.exceptions import TaskResultDoesNotExist
except ImportError:  # the django-tasks backport
    from django_tasks import task_backends
    from django_tasks.exceptions import TaskResultDoesNotExist

from shop import tasks, views  # noqa: E402
from shop.models import Order  # noqa: E402

FLAVOR_IMPORT = (
    "try:\n    from django.tasks import task\n"
    "except ImportError:\n    from django_tasks import task\n"
)


class RolledBack(Exception):
    """Raised inside a transaction to roll it back."""


def described(result):
    """A `TaskResult` as JSON."""

    def when(moment):
        return None if moment is None else moment.isoformat()

    out = {
        "id": result.id,
        "status": str(result.status),
        "task": result.task.module_path,
        "priority": result.task.priority,
        "queue_name": result.task.queue_name,
        "backend": result.backend,
        "args": result.args,
        "kwargs": result.kwargs,
        "attempts": result.attempts,
        "worker_ids": result.worker_ids,
        "errors": [
            {
                "path": error.exception_class_path,
                "class": error.exception_class.__name__,
                "last_line": error.traceback.strip().splitlines()[-1],
            }
            for error in result.errors
        ],
        "is_finished": result.is_finished,
        "enqueued_at": when(result.enqueued_at),
        "started_at": when(result.started_at),
        "last_attempted_at": when(result.last_attempted_at),
        "finished_at": when(result.finished_at),
    }
    if str(result.status) == "SUCCESSFUL":
        out["return_value"] = result.return_value
    return out


def _found(result_id, backend="default"):
    try:
        task_backends[backend].get_result(result_id)
    except TaskResultDoesNotExist:
        return False
    return True


# -- operations ----------------------------------------------------------------------------
def post(path, data=None):
    answer = Client(raise_request_exception=False).post(path, data or {})
    is_json = answer.get("Content-Type") == "application/json"
    return {"status": answer.status_code, "json": answer.json() if is_json else None}


def result(result_id, backend="default"):
    try:
        return described(task_backends[backend].get_result(result_id))
    except TaskResultDoesNotExist:
        return None


def wait(ids, timeout=60, statuses=("SUCCESSFUL", "FAILED")):
    """Each result refreshed until its status is one of `statuses` (or the deadline)."""
    backend = task_backends["default"]
    results = [backend.get_result(i) for i in ids]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for each in results:
            if str(each.status) not in statuses:
                each.refresh()
        if all(str(each.status) in statuses for each in results):
            break
        time.sleep(0.05)
    return [described(each) for each in results]


def read_async(result_id):
    """The result read and refreshed by the async API (`aget_result`, `arefresh`)."""

    async def read():
        result = await task_backends["default"].aget_result(result_id)
        await result.arefresh()
        return described(result)

    return asyncio.run(read())


def enqueue(task, args=(), kwargs=None, using=None):
    """`tasks.TASK.using(**using).enqueue(*args, **kwargs)`, described."""
    return described(getattr(tasks, task).using(**(using or {})).enqueue(*args, **(kwargs or {})))


def outbox():
    """The recipients of every email sent (the file-based backend's files)."""
    from django.conf import settings

    found = []
    for name in sorted(os.listdir(settings.EMAIL_FILE_PATH)):
        with open(os.path.join(settings.EMAIL_FILE_PATH, name)) as file:
            found += re.findall(r"^To: (.*)$", file.read(), flags=re.MULTILINE)
    return found


def processed(order_id):
    return Order.objects.get(pk=order_id).processed


def transactions():
    """Each way an enqueue meets a transaction, on both backends: the queue in Django's
    database (`default`: the enqueue joins the transaction) and elsewhere (`elsewhere`:
    at the commit)."""
    out = {}
    try:
        with transaction.atomic():
            order = Order.objects.create(item="never")
            rolled = tasks.mark_processed.enqueue(order.pk)
            out["seen_outside_before_commit"] = _found(rolled.id)
            raise RolledBack
    except RolledBack:
        pass
    out["rolled_back"] = {"id": rolled.id, "found": _found(rolled.id)}
    with transaction.atomic():
        try:
            with transaction.atomic():
                inner = tasks.count_words.enqueue("savepoint")
                raise RolledBack
        except RolledBack:
            pass
        kept = tasks.count_words.enqueue("kept")
    out["savepoint"] = {"found": _found(inner.id), "kept": _found(kept.id)}

    elsewhere = tasks.count_words.using(backend="elsewhere")
    with transaction.atomic():
        later = elsewhere.enqueue("at the commit")
        before = _found(later.id, "elsewhere")
    stored = task_backends["elsewhere"].get_result(later.id)
    out["on_commit"] = {
        "found_before": before,
        "found_after": True,
        "same_id": stored.id == later.id,
        "status": str(stored.status),
    }
    try:
        with transaction.atomic():
            never = elsewhere.enqueue("never")
            raise RolledBack
    except RolledBack:
        pass
    out["on_commit_rolled_back"] = {"found": _found(never.id, "elsewhere")}
    outside = elsewhere.enqueue("no transaction")
    out["on_commit_outside"] = {"found": _found(outside.id, "elsewhere")}
    return out


def failed_view():
    """A view that enqueues, then raises: its transaction (and the job) roll back."""
    views.ENQUEUED_BEFORE_FAILING.clear()
    answer = post("/orders/broken/", {"item": "lost"})
    (job_id,) = views.ENQUEUED_BEFORE_FAILING
    return {"status": answer["status"], "id": job_id, "found": _found(job_id)}


REFUSALS = {
    "unknown_word": "@task(max_retry=3)\ndef f(): pass",
    "heartq_queue": "@task(queue='emails')\ndef f(): pass",
    "depends_on_at_definition": "@task(depends_on=['x'])\ndef f(): pass",
    "priority_out_of_range": "@task(priority=101)\ndef f(): pass",
    "bad_retries": "@task(max_retries=-1)\ndef f(): pass",
    "bad_rate": "@task(rate_limit='5/ s')\ndef f(): pass",
    "template_of_nothing": "@task(concurrency_key='t:{nope}', concurrency_limit=1)\ndef f(x): pass",
    "star_args": "@task()\ndef f(*emails): pass",
    "ctx_parameter": "@task()\ndef f(ctx): pass",
    "using_definition_word": "@task()\ndef f(x): pass\nf.using(timeout=5)",
    "using_bad_value": "@task()\ndef f(x): pass\nf.using(unique_for=-1)",
    "using_priority_out_of_range": "@task()\ndef f(x): pass\nf.using(priority=-101)",
    "unique_twice": "@task(unique=True, unique_key='k:{x}')\ndef f(x): pass",
    "intervals_and_backoff": "@task(retry_intervals=[1], retry_backoff=2)\ndef f(x): pass",
    "window_of_no_key": "@task(unique_for=5)\ndef f(x): pass",
    "bad_retry_delay": "@task(retry_delay=5)\ndef f(x): pass",
    "bad_expiry": "@task(expires=-1)\ndef f(x): pass",
    "using_bad_expiry": "@task()\ndef f(x): pass\nf.using(expires=0)",
}
ACCEPTED = (
    "@task(max_retries=2, timeout=5, heartbeat_timeout=60, retry_schedule='constant', "
    "retry_jitter=False, unique_key='k:{x}', unique_for=5, rate_limit='5/s', "
    "rate_key='r:{x}', concurrency_key='c:{x}', concurrency_limit=2, retry_on=(ValueError,))\n"
    "def f(x): pass\n"
    "f.using(depends_on=[], meta={'a': 1}, unique_key='literal', on_conflict='raise')\n"
    "@task(retry_intervals=[1, 5], retry_delay=lambda attempt, exc: None, max_snoozes=3, "
    "unique=True, unique_for=60, expires=300)\n"
    "def g(x): pass\n"
    "g.using(expires=30, unique=False)"
)


def refusals():
    """What each definition the backend cannot carry raises (class, message); and one
    that carries every option, accepted."""
    out = {}
    for n, (name, source) in enumerate({**REFUSALS, "accepted": ACCEPTED}.items()):
        module = types.ModuleType(f"refusal_{n}")
        sys.modules[module.__name__] = module
        try:
            exec(FLAVOR_IMPORT + source, module.__dict__)
        except Exception as exc:  # noqa: BLE001 - what the definition raised is the answer
            out[name] = [type(exc).__name__, str(exc)]
        else:
            out[name] = None
    return out


def flags():
    backend = task_backends["default"]
    return {
        name: getattr(backend, name)
        for name in ("supports_defer", "supports_async_task", "supports_get_result",
                     "supports_priority")
    }  # fmt: skip


def dashboard(who, path, method="get"):
    """`path` of the dashboard as `who` sees it: `anonymous`, `customer` (no staff),
    `staff`, `superuser`. A POST carries the dashboard's CSRF cookie and field, read
    from the page first."""
    client = Client(raise_request_exception=False)
    if who != "anonymous":
        user, _ = get_user_model().objects.get_or_create(
            username=who, is_staff=who != "customer", is_superuser=who == "superuser"
        )
        client.force_login(user)
    if method == "post":
        page = client.get(path.rsplit("/", 1)[0]).content.decode()
        token = re.search(r'name="_csrf" value="([^"]+)"', page)
        answer = client.post(path, {"_csrf": token[1] if token else ""}, HTTP_ORIGIN="http://testserver")
    else:
        answer = client.get(path)
    return {
        "status": answer.status_code,
        "location": answer.get("Location"),
        "body": answer.content.decode(errors="replace"),
    }


OPERATIONS = {
    fn.__name__: fn
    for fn in (post, result, wait, read_async, enqueue, outbox, processed, transactions,
               failed_view, refusals, flags, dashboard)
}  # fmt: skip


def main():
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout = sys.stderr  # stray prints must not break the answers
    for line in sys.stdin:
        request = json.loads(line)
        try:
            answer = {"ok": OPERATIONS[request["op"]](**request.get("args", {}))}
        except Exception as exc:  # noqa: BLE001 - told to the test, which fails on it
            answer = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
