"""What `enqueued` and the assertions look at by default (jobs not ended), several
statuses at once, nested subsets, refuting for a while, due times, assertions on
arguments alone; and a drain that runs a pipeline step routed to another queue. On the
backends of a layer (tests/testing/conftest.py), through `heartq.testing` as a user's
suite calls it."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

import heartq
from heartq.testing import (
    assert_enqueued,
    assert_not_enqueued,
    drain,
    enqueued,
    expect_enqueued,
)


@pytest.fixture
def notify(app: heartq.App) -> heartq.Task[..., None]:
    @app.task
    def notify(user: dict, channels: list | None = None) -> None: ...

    return notify


def test_a_refutation_after_a_drain_looks_at_jobs_not_ended(app: heartq.App, notify) -> None:
    notify.enqueue({"id": 1})
    drain(app)
    assert_not_enqueued(notify)  # it ran: nothing left to run
    assert enqueued(app) == []
    assert len(enqueued(app, status="any")) == 1
    assert_enqueued(notify, status="succeeded")
    assert_enqueued(notify, status=("succeeded", "dead"), count=1)
    assert_not_enqueued(notify, status=["dead", "cancelled"])
    with pytest.raises(AssertionError, match=r"now dead or succeeded; found 1"):
        assert_not_enqueued(notify, status=("succeeded", "dead"))
    with pytest.raises(ValueError, match="'finished' is not a valid JobStatus"):
        enqueued(app, status=("succeeded", "finished"))


def test_nested_mappings_match_as_subsets(app: heartq.App, notify) -> None:
    notify.enqueue({"id": 7, "profile": {"tz": "UTC", "lang": "fr"}}, channels=["mail", "sms"])
    assert_enqueued(notify, args={"user": {"profile": {"lang": "fr"}}})
    assert_enqueued(notify, args={"channels": ["mail", "sms"]})
    assert_not_enqueued(notify, args={"user": {"profile": {"lang": "de"}}})
    assert_not_enqueued(notify, args={"user": {"missing": None}})
    assert_not_enqueued(notify, args={"channels": ["mail"]})  # a list: its length exactly


def test_assert_not_enqueued_within_refutes_for_a_while(app: heartq.App, notify) -> None:
    assert_not_enqueued(notify, within=0.2)  # nothing comes: passes after 0.2 s

    later = threading.Timer(0.1, lambda: notify.enqueue({"id": 2}))
    later.start()
    try:
        with pytest.raises(AssertionError, match=r"^expected no job of task 'notify'"):
            assert_not_enqueued(notify, within=5)
    finally:
        later.join()


def test_run_at_matches_within_a_tolerance(app: heartq.App, notify) -> None:
    eta = datetime.now(UTC) + timedelta(hours=1)
    notify.options(eta=eta).enqueue({"id": 3})
    assert_enqueued(notify, run_at=eta)
    assert_enqueued(notify, run_at=eta + timedelta(seconds=20), run_at_tolerance=30)
    with pytest.raises(AssertionError, match=r"due at .* \(\+/- 1 s\) not ended; found 0"):
        assert_enqueued(notify, run_at=eta + timedelta(minutes=5))
    assert_not_enqueued(notify, run_at=datetime.now(UTC))
    with pytest.raises(TypeError, match=r"^run_at must be a timezone-aware datetime"):
        assert_enqueued(notify, run_at=datetime.now())  # a naive one


def test_arguments_alone_without_a_task(app: heartq.App, notify) -> None:
    notify.enqueue({"id": 4})
    with pytest.warns(heartq.TaskNotDeclaredWarning):
        app.enqueue("elsewhere", {"user": {"id": 4}}, queue="other")
    jobs = assert_enqueued(args={"user": {"id": 4}}, app=app, count=2)
    assert {job.task for job in jobs} == {"notify", "elsewhere"}
    assert_not_enqueued(args={"user": {"id": 5}}, app=app)
    with expect_enqueued(args={"user": {"id": 6}}, app=app):
        notify.enqueue({"id": 6})
    with pytest.raises(TypeError, match=r"^assert_enqueued: no task is named: pass app="):
        assert_enqueued(args={"user": {"id": 4}})


def test_drain_runs_a_step_routed_to_another_queue(app: heartq.App) -> None:
    ran: list[str] = []

    @app.task
    def fetch() -> None:
        ran.append("fetch")

    @app.task
    def index() -> None:
        ran.append("index")

    heartq.chain(fetch.s(), index.s().set(queue="indexing")).enqueue()
    report = drain(app)
    assert ran == ["fetch", "index"], report
    assert [run.queue for run in report] == ["default", "indexing"]
