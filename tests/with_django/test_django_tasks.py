"""heartq behind Django's own tasks framework (heartq.contrib.django), on a real Django
project (tests/with_django/project) driven through Django's API only: Django 6.1 from the
package index and the django-tasks backport on the oldest Django it supports, each on
SQLite and on PostgreSQL (tests/with_django/conftest.py), the tasks run by
`manage.py heartq_worker` processes.
"""

from __future__ import annotations

import itertools
import subprocess
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.with_django.harness import PROJECT, Site, wait_until

pytestmark = pytest.mark.slow

ERROR_CLASS = {"django61": "InvalidTask", "backport": "InvalidTaskError"}
"""What Django calls a task it refuses (the backport's name has a suffix)."""


def only_on(site: Site, *names: str) -> None:
    """Run this test on these sites only (`flavor-database`): a guarantee that differs
    neither by Django environment nor by database is checked on two sites, one of each
    environment and one of each database, not four."""
    if site.name not in names:
        pytest.skip(f"checked on {', '.join(names)}")


def enqueued(site: Site, path: str, data: dict[str, Any] | None = None) -> str:
    """POST a view that enqueues; the id of the `TaskResult` it answers."""
    answer = site.call("post", path=path, data=data or {})
    assert answer["status"] == 202, answer
    assert answer["json"]["status"] == "READY", answer
    return str(answer["json"]["id"])


def moment(text: str) -> datetime:
    return datetime.fromisoformat(text)


def test_migrate_creates_the_queue(site: Site) -> None:
    """`manage.py migrate` made heartq's tables (checked before any other heartq use)."""
    assert site.queue_tables_after_migrate, site.migrate_output
    assert "heartq: TASKS['default'] queue at" in site.migrate_output


def test_the_documentations_tasks_run_on_the_worker(site: Site) -> None:
    """Tasks from Django's documentation, enqueued from views, run by the worker: their
    results refreshed to SUCCESSFUL with their return values; a deferred one not started
    before its `run_after`; an async one (enqueued by an async view's `aenqueue`); one
    that takes the context; a failing one FAILED with an error per attempt (its retries
    a `@task` keyword), another with its retries from the backend's OPTIONS."""
    email = enqueued(site, "/email/", {"to": ["ada@example.org"]})
    later = site.call("post", path="/email/later/", data={"to": "bob@example.org", "seconds": 1})
    assert later["status"] == 202, later
    context = enqueued(site, "/email/context/", {"to": "cy@example.org"})
    words = enqueued(site, "/words/", {"text": "one two three"})
    refund = enqueued(site, "/fail/", {"order": 7})
    declined = enqueued(site, "/decline/", {"order": 8})
    ids = [email, later["json"]["id"], context, words, refund, declined]
    results = {r["id"]: r for r in site.call("wait", ids=ids)}

    sent = results[email]
    assert sent["status"] == "SUCCESSFUL", sent
    assert (sent["return_value"], sent["attempts"], sent["errors"]) == (1, 1, [])
    assert (sent["args"], sent["kwargs"]) == ([["ada@example.org"]], {
        "subject": "Hello", "message": "Welcome!"})  # fmt: skip
    assert sent["task"] == "shop.tasks.email_users"
    assert len(sent["worker_ids"]) == 1
    assert moment(sent["enqueued_at"]) <= moment(sent["started_at"]) <= moment(
        sent["finished_at"])  # fmt: skip

    deferred = results[later["json"]["id"]]
    assert deferred["status"] == "SUCCESSFUL", deferred
    # heartq's times are to the millisecond, Django's run_after to the microsecond
    run_after = moment(later["json"]["run_after"]).replace(microsecond=0) + timedelta(
        milliseconds=moment(later["json"]["run_after"]).microsecond // 1000
    )
    assert moment(deferred["started_at"]) >= run_after

    with_context = results[context]
    assert with_context["status"] == "SUCCESSFUL", with_context
    assert with_context["return_value"] == {"attempt": 1, "id": context, "sent": 1}

    assert (results[words]["status"], results[words]["return_value"]) == ("SUCCESSFUL", 3)
    assert results[words]["args"] == ["one two three"]

    failed = results[refund]
    assert failed["status"] == "FAILED", failed
    assert failed["attempts"] == 2  # max_retries=1, written as @task's keyword
    assert failed["errors"] == [
        {"path": "builtins.LookupError", "class": "LookupError",
         "last_line": "LookupError: no payment for order 7"},
    ] * 2  # fmt: skip
    assert failed["is_finished"] and failed["finished_at"] is not None
    once = results[declined]  # max_retries=0, from the backend's OPTIONS["TASKS"]
    assert (once["status"], once["attempts"], once["args"]) == ("FAILED", 1, [8]), once
    assert [e["last_line"] for e in once["errors"]] == ["ValueError: card declined for order 8"]

    assert sorted(site.call("outbox")) == ["ada@example.org", "bob@example.org", "cy@example.org"]
    assert site.call("read_async", result_id=words) == results[words]
    worker_log = site.main_worker.log()  # the framework's signals, sent by the worker
    assert f"id={email} path=shop.tasks.email_users state=SUCCESSFUL" in worker_log
    assert f"id={refund} path=shop.tasks.refund state=FAILED" in worker_log


def test_priorities_order_the_runs(site: Site) -> None:
    """Jobs of higher priority run first (one slot, jobs waiting in a queue no worker was
    claiming); `manage.py heartq_worker --burst` exits once they are done. On one site its
    process pool runs them: each child sets Django up itself."""
    only_on(site, "django61-sqlite", "backport-postgres")
    ids = {
        priority: enqueued(site, f"/ordered/{priority}/", {"label": f"p{priority}"})
        for priority in (0, -100, 100, 5)
    }
    pool = "process" if site.name == "django61-sqlite" else "thread"
    site.manage("heartq_worker", "--queues", "ordered", "--concurrency", "1", "--burst",
                "--poll-interval", "0.05", "--pool", pool)  # fmt: skip
    results = {r["id"]: r for r in site.call("wait", ids=list(ids.values()), timeout=10)}
    assert all(r["status"] == "SUCCESSFUL" for r in results.values()), results
    by_start = sorted(ids, key=lambda p: moment(results[ids[p]]["started_at"]))
    assert by_start == [100, 5, 0, -100], results
    assert results[ids[100]]["priority"] == 100


def test_the_worker_command_takes_heartq_worker_s_options(site: Site) -> None:
    """`manage.py heartq_worker` parses `heartq worker`'s options as it does (the help,
    the usage errors), plus `--backend`; a backend that is not heartq's is one line."""
    only_on(site, "django61-sqlite", "backport-postgres")
    shown = site.manage("heartq_worker", "--help").stdout
    assert "Usage: manage.py heartq_worker [OPTIONS]" in shown
    for option in ("--backend", "--queues", "--concurrency", "--pool", "--burst", "--lease"):
        assert option in shown, option
    zero = site.manage("heartq_worker", "--concurrency", "0", status=2)
    assert "Invalid value for '--concurrency'" in zero.stderr
    unknown = site.manage("heartq_worker", "--backend", "nope", "--burst", status=1)
    assert unknown.stderr.startswith("heartq: error: no task backend 'nope'"), unknown.stderr
    assert len(unknown.stderr.strip().splitlines()) == 1, unknown.stderr


def test_a_killed_worker_s_task_runs_again_elsewhere(site: Site, tmp_path: Path) -> None:
    """A worker SIGKILLed while a Django task runs: another worker runs the task again,
    within heartq's recovery time, and it succeeds; its `TaskResult` shows both attempts,
    their two workers, and the crash as the first attempt's error."""
    only_on(site, "django61-postgres", "backport-sqlite")
    marker = tmp_path / "started"
    workers = site.workers("--queues", "crashy", "--concurrency", "1", count=2)
    result_id = site.call("post", path="/crash/", data={"marker": str(marker)})["json"]["id"]
    wait_until(marker.exists, 30, "the first attempt to start")
    first_pid = int(marker.read_text().rsplit("-", 2)[1])  # worker ids: host-pid-random
    (first,) = [w for w in workers if w.pid == first_pid]
    killed_at = time.monotonic()
    first.kill()
    (ended,) = site.call("wait", ids=[result_id], timeout=30)
    recovered = time.monotonic() - killed_at
    for worker in workers:
        worker.stop()

    assert ended["status"] == "SUCCESSFUL", ended
    assert ended["return_value"] == {"attempt": 2, "heartq_attempt": 2}
    assert ended["attempts"] == 2
    assert ended["worker_ids"][0] == marker.read_text()
    assert ended["worker_ids"][0] != ended["worker_ids"][1]
    assert [e["path"] for e in ended["errors"]] == [
        "heartq.contrib.django.errors.AttemptCrashed"
    ], ended
    assert ended["errors"][0]["class"] == "AttemptCrashed"
    limit = 12.0 if site.database["engine"] == "postgresql" else 8.0  # 3 s grace on PostgreSQL
    assert recovered < limit, recovered


def test_an_enqueue_commits_with_the_transaction(site: Site) -> None:
    """`transaction.atomic()`: rolled back, no job (a savepoint's too); committed, the job
    runs once; a view that raises after `enqueue()` leaves no job. With the queue in
    another database, the enqueue waits for the commit, under the id it answered."""
    seen = site.call("transactions")
    assert seen["seen_outside_before_commit"] is False  # written in Django's transaction
    assert seen["rolled_back"]["found"] is False
    assert seen["savepoint"] == {"found": False, "kept": True}
    assert seen["on_commit"] == {
        "found_before": False, "found_after": True, "same_id": True, "status": "READY"
    }  # fmt: skip
    assert seen["on_commit_rolled_back"] == {"found": False}
    assert seen["on_commit_outside"] == {"found": True}

    failed = site.call("failed_view")
    assert failed["status"] == 500 and failed["found"] is False, failed

    made = site.call("post", path="/orders/", data={"item": "book"})
    assert made["status"] == 202, made
    (ran,) = site.call("wait", ids=[made["json"]["id"]])
    assert (ran["status"], ran["return_value"], ran["attempts"]) == ("SUCCESSFUL", 1, 1), ran
    assert site.call("processed", order_id=made["json"]["order"]) == 1


def attempts_logged(log: Path) -> list[tuple[int, float]]:
    """The attempts a task noted in `log` (`shop.tasks._note_attempt`): number, start."""
    lines = log.read_text().split("\n") if log.exists() else []
    return [(int(n), float(t)) for n, t in (line.split() for line in lines if line)]


def test_heartq_s_newer_options_reach_a_django_task(site: Site, tmp_path: Path) -> None:
    """heartq's newer task options as a Django task takes the others, run by real
    workers: `retry_intervals` in `@task()` (its attempts that far apart, not 5 s of
    backoff), `retry_delay` from the backend's `OPTIONS['TASKS']`, `unique=True` (one
    queued job per arguments; `using(unique=False)` opts out), `expires` in `@task()`
    and `using()` (a job not started in time never runs; the enqueue's wins),
    `max_snoozes` (the second snooze counts: the first attempt's `task_finished` says
    READY, the second's FAILED)."""
    only_on(site, "django61-sqlite", "backport-postgres")
    flaky_log, paced_log = tmp_path / "flaky", tmp_path / "paced"
    flaky = site.call("enqueue", task="flaky", kwargs={"log": str(flaky_log)})["id"]
    paced = site.call("enqueue", task="paced", kwargs={"log": str(paced_log)})["id"]
    snoozy = site.call("enqueue", task="too_early", args=["the file"])["id"]

    acme = [site.call("enqueue", task="refresh", args=["acme"])["id"] for _ in range(2)]
    globex = site.call("enqueue", task="refresh", args=["globex"])["id"]
    again = site.call("enqueue", task="refresh", args=["acme"], using={"unique": False})["id"]
    assert acme[0] == acme[1] and len({acme[0], globex, again}) == 3
    enqueued_at = time.monotonic()
    expiring = site.call("enqueue", task="stamp", args=["late"], using={"expires": 0.5})["id"]
    lasting = site.call("enqueue", task="stamp", args=["kept"], using={"expires": 600})["id"]
    soon = site.call("enqueue", task="stamp_soon", args=["late too"])["id"]  # @task(expires=)
    wait_until(lambda: time.monotonic() > enqueued_at + 0.8, 5, "the expiries to pass")
    site.manage("heartq_worker", "--queues", "parked", "--concurrency", "1", "--burst",
                "--poll-interval", "0.05")  # fmt: skip
    parked = {r["id"]: r for r in site.call("wait", ids=[*acme[:1], globex, again, expiring,
                                                         lasting, soon], timeout=10)}  # fmt: skip
    assert [parked[i]["return_value"] for i in (acme[0], globex, again, lasting)] == [
        "acme", "globex", "acme", "kept"], parked  # fmt: skip
    for late in (parked[expiring], parked[soon]):
        assert (late["status"], late["attempts"], late["started_at"]) == ("FAILED", 0, None), late
        assert [e["class"] for e in late["errors"]] == ["JobCancelled"], late
        assert "expired" in late["errors"][0]["last_line"], late

    ended = {r["id"]: r for r in site.call("wait", ids=[flaky, paced, snoozy], timeout=30)}
    assert (ended[flaky]["status"], ended[flaky]["attempts"]) == ("FAILED", 3), ended[flaky]
    starts = [t for _, t in attempts_logged(flaky_log)]
    waits = [later - earlier for earlier, later in itertools.pairwise(starts)]
    assert len(waits) == 2 and 0.3 <= waits[0] < 2.0 <= waits[1], waits
    assert (ended[paced]["status"], ended[paced]["attempts"]) == ("FAILED", 2), ended[paced]
    first, second = (t for _, t in attempts_logged(paced_log))
    assert 1.5 <= second - first < 3.5, second - first  # not 5 s +- 25 % of backoff
    snoozed = ended[snoozy]
    assert (snoozed["status"], snoozed["attempts"]) == ("FAILED", 1), snoozed
    assert "max_snoozes" in snoozed["errors"][0]["last_line"], snoozed
    said = f"id={snoozy} path=shop.tasks.too_early state="  # the framework's task_finished
    worker_log = site.main_worker.log()
    assert (worker_log.count(said + "READY"), worker_log.count(said + "FAILED")) == (1, 1)


def test_capability_flags_and_refusals(site: Site) -> None:
    """Every capability flag is true (each is exercised by the tests above); what the
    backend cannot carry is refused where it is written, in one line."""
    only_on(site, "django61-sqlite", "backport-sqlite")  # no database in this
    assert site.call("flags") == dict.fromkeys(
        ("supports_defer", "supports_async_task", "supports_get_result", "supports_priority"),
        True,
    )
    refused = site.call("refusals")
    assert refused.pop("accepted") is None
    expected = ERROR_CLASS[site.flavor.name]
    for name, (kind, message) in refused.items():
        assert kind == expected, (name, kind, message)
        assert "\n" not in message and message, (name, message)
    assert "'max_retry'" in refused["unknown_word"][1]
    assert "queue_name" in refused["heartq_queue"][1]
    assert "task.using(depends_on=" in refused["depends_on_at_definition"][1]
    assert "between -100 and 100" in refused["priority_out_of_range"][1]
    assert "between -100 and 100" in refused["using_priority_out_of_range"][1]
    assert "max_retries must be" in refused["bad_retries"][1]
    assert "'nope'" in refused["template_of_nothing"][1]
    assert "*emails" in refused["star_args"][1]
    assert "'ctx'" in refused["ctx_parameter"][1]
    assert "@task(timeout=...)" in refused["using_definition_word"][1]
    assert "unique_for" in refused["using_bad_value"][1]
    assert "not both" in refused["unique_twice"][1]
    assert "retry_intervals replaces retry_backoff" in refused["intervals_and_backoff"][1]
    assert "unique_for needs a unique_key or unique=True" in refused["window_of_no_key"][1]
    assert "retry_delay" in refused["bad_retry_delay"][1]
    assert "expires" in refused["using_bad_expiry"][1]
    assert "expires" in refused["bad_expiry"][1]


def test_the_dashboard_is_behind_the_staff_login(site: Site) -> None:
    """heartq's dashboard in the project's URLs: anonymous users and customers are sent
    to the login page; staff read it; a superuser may act (a cancel, through the
    dashboard's own CSRF check)."""
    job_id = enqueued(site, "/ordered/1/", {"label": "to cancel"})
    for who in ("anonymous", "customer"):
        page = site.call("dashboard", who=who, path="/heartq/")
        assert page["status"] == 302 and page["location"].startswith("/login/?next="), page
    overview = site.call("dashboard", who="staff", path="/heartq/")
    assert overview["status"] == 200 and "heartq" in overview["body"], overview["status"]
    shown = site.call("dashboard", who="staff", path=f"/heartq/jobs/{job_id}")
    assert shown["status"] == 200 and "shop.tasks.record" in shown["body"]
    refused = site.call("dashboard", who="staff", path=f"/heartq/jobs/{job_id}/cancel",
                        method="post")  # fmt: skip
    assert refused["status"] == 403, refused["status"]
    done = site.call("dashboard", who="superuser", path=f"/heartq/jobs/{job_id}/cancel",
                     method="post")  # fmt: skip
    assert done["status"] == 303, done
    (cancelled,) = site.call("wait", ids=[job_id], timeout=5)
    assert cancelled["status"] == "FAILED"
    assert [e["path"] for e in cancelled["errors"]] == ["heartq.errors.JobCancelled"]


def test_heartq_testing_from_django_s_own_tests(site: Site) -> None:
    """heartq.testing in the project's own tests (project/shop/checks_with_heartq.py):
    a fresh queue per test from Django's TestCase and TransactionTestCase, and
    pytest-django's fixture; run by pytest-django (Django 6.1) and by `manage.py test`
    (the backport), each on Django's in-memory SQLite test database."""
    only_on(site, "django61-sqlite", "backport-sqlite")
    if site.flavor.name == "django61":
        done = subprocess.run(
            [site.flavor.python, "-m", "pytest", "-q", "shop/checks_with_heartq.py"],
            cwd=PROJECT, env=site.env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert "4 passed" in done.stdout, done.stdout
    else:
        done = site.manage("test", "shop", "--pattern", "checks_*.py", "--noinput")
        assert "Ran 3 tests" in done.stderr and "OK" in done.stderr, done.stderr
