"""One event stream per app (`app.events`, heartq/event_stream.py): each event of a job's
life is told once, and the log, the metrics, the crash hooks and a listener each hear it
once; two apps in one process, each with a real worker on its own queue, hear only their
own events; the deprecated process-wide listener still hears every app, and warns."""

from __future__ import annotations

import collections
import contextlib
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import heartq
from heartq import events
from heartq.metrics import WorkerMetrics
from heartq.model import WorkerInfo
from tests.runtime.conftest import IN_PROCESS
from tests.support import wait_for

Told = tuple[str, str, int]
"""(event, job id, attempt): one emission about one attempt of one job."""


def _about_jobs(heard: list[tuple[str, dict[str, Any]]], job_ids: set[str]) -> list[Told]:
    return [
        (name, fields["job_id"], fields["attempt"])
        for name, fields in heard
        if fields.get("job_id") in job_ids
    ]


@pytest.fixture
def other_app(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[heartq.App]:
    """A second app, on a queue of its own (another database) of the same backend."""
    with contextlib.ExitStack() as stack:
        if backend == "postgres":
            schemas = request.getfixturevalue("pg_schemas")
            url = schemas.take()
            stack.callback(schemas.drop_behind, url)
        else:
            url = f"sqlite:///{tmp_path / 'other.db'}"
        application = heartq.App(url, **IN_PROCESS)
        yield application
        application.close()


def test_each_event_of_a_jobs_life_is_told_once_to_every_subscriber(
    app: heartq.App, run_worker: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A job that fails once then succeeds, one that fails for good, and one whose
    worker died holding it (reclaimed by the real worker's liveness probe, then run):
    a listener hears each event of each attempt once, the log writes each once, the
    metrics count each once, and the crash hook runs once."""
    heard: list[tuple[str, dict[str, Any]]] = []
    app.events.subscribe(lambda event: heard.append((event.name, event.fields)))
    crashes: list[str] = []
    app.hooks.crash(lambda info: crashes.append(info.job_id))
    failed_once: set[str] = set()

    @app.task(max_retries=1, retry_backoff=0)
    def flaky(key: str) -> str:
        if key not in failed_once:
            failed_once.add(key)
            raise RuntimeError("first attempt fails")
        return key

    @app.task(max_retries=0)
    def hopeless() -> None:
        raise RuntimeError("always")

    @app.task(max_retries=3, retry_backoff=0)
    def orphan() -> str:
        return "ran"

    # A worker that claimed `orphan` and died: registered, never holding a liveness lock.
    reclaimed = orphan.enqueue()
    app.store.register_worker(WorkerInfo("gone", "test-host", 1, ("default",), 1))
    (held,) = app.store.claim("gone", ["default"], 1, 60.0)
    assert held.id == reclaimed
    retried = flaky.enqueue("a")
    dead = hopeless.enqueue()

    thread = run_worker(app)
    metrics = WorkerMetrics(thread.worker)
    try:
        with caplog.at_level(logging.DEBUG, logger="heartq"), thread:
            wait_for(
                lambda: (
                    [app.get_job(j)["status"] for j in (retried, dead, reclaimed)]
                    == ["succeeded", "dead", "succeeded"]
                ),
                15,
                what="the three jobs to end",
            )
            wait_for(lambda: crashes, 5, what="the crash hook")
    finally:
        metrics.close()

    jobs = {retried, dead, reclaimed}
    told = _about_jobs(heard, jobs)
    assert sorted(told) == sorted(
        [
            (events.JOB_CLAIMED, retried, 1),
            (events.JOB_FAILED, retried, 1),
            (events.JOB_RETRY_SCHEDULED, retried, 1),
            (events.JOB_CLAIMED, retried, 2),
            (events.JOB_SUCCEEDED, retried, 2),
            (events.JOB_CLAIMED, dead, 1),
            (events.JOB_FAILED, dead, 1),
            (events.JOB_DEAD, dead, 1),
            (events.JOB_RECLAIMED, reclaimed, 1),
            (events.JOB_CLAIMED, reclaimed, 2),
            (events.JOB_SUCCEEDED, reclaimed, 2),
        ]
    )
    assert [f for n, f in heard if n == events.WORKER_DEACTIVATED] == [
        next(f for n, f in heard if n == events.WORKER_DEACTIVATED)
    ]
    logged = _about_jobs(
        [(r.getMessage(), getattr(r, "heartq_fields", {})) for r in caplog.records], jobs
    )
    assert collections.Counter(logged) == collections.Counter(told)
    assert crashes == [reclaimed]
    counted = metrics.registry.get_sample_value
    for task, claims in (("flaky", 2), ("hopeless", 1), ("orphan", 1)):
        labels = {"task": task, "queue": "default"}
        assert counted("heartq_jobs_claimed_total", labels) == claims, task
    assert counted("heartq_jobs_failed_total", {"task": "flaky", "queue": "default"}) == 1
    assert counted("heartq_jobs_dead_total", {"task": "hopeless"}) == 1
    (found_by,) = [f["detected_by"] for n, f in heard if n == events.JOB_RECLAIMED]
    reclaims = {"task": "orphan", "detected_by": found_by}
    assert counted("heartq_jobs_reclaimed_total", reclaims) == 1


def test_two_apps_in_one_process_hear_only_their_own_events(
    app: heartq.App,
    other_app: heartq.App,
    run_worker: Callable[..., Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each app with a real worker on its own queue, both running at once: each app's
    listener hears its own worker's events and jobs only, worker A's metrics count A's
    jobs only, and the log (a subscriber of both) writes both."""
    heard: dict[str, list[tuple[str, dict[str, Any]]]] = {"a": [], "b": []}
    app.events.subscribe(lambda event: heard["a"].append((event.name, event.fields)))
    other_app.events.subscribe(lambda event: heard["b"].append((event.name, event.fields)))

    @app.task
    def alpha(n: int) -> int:
        return n

    @other_app.task
    def beta(n: int) -> int:
        return n

    mine = {alpha.enqueue(n) for n in range(3)}
    theirs = {beta.enqueue(n) for n in range(2)}
    first, second = run_worker(app), run_worker(other_app)
    metrics = WorkerMetrics(first.worker)
    try:
        with caplog.at_level(logging.DEBUG, logger="heartq"), first as a, second as b:
            wait_for(
                lambda: (
                    all(app.get_job(j)["status"] == "succeeded" for j in mine)
                    and all(other_app.get_job(j)["status"] == "succeeded" for j in theirs)
                ),
                15,
                what="both apps' jobs to succeed",
            )
    finally:
        metrics.close()

    for key, worker, jobs in (("a", a, mine), ("b", b, theirs)):
        workers = {f["worker_id"] for _, f in heard[key] if "worker_id" in f}
        assert workers == {worker.id}, key
        job_ids = {f["job_id"] for _, f in heard[key] if "job_id" in f}
        assert job_ids == jobs, key
        succeeded = {f["job_id"] for n, f in heard[key] if n == events.JOB_SUCCEEDED}
        assert succeeded == jobs, key
        started = [f for n, f in heard[key] if n == events.WORKER_STARTED]
        assert [f["worker_id"] for f in started] == [worker.id], key
    counted = metrics.registry.get_sample_value
    assert counted("heartq_jobs_succeeded_total", {"task": "alpha", "queue": "default"}) == 3
    assert counted("heartq_jobs_succeeded_total", {"task": "beta", "queue": "default"}) is None
    logged = {
        r.heartq_fields["job_id"]  # type: ignore[attr-defined]
        for r in caplog.records
        if r.getMessage() == events.JOB_SUCCEEDED
    }
    assert logged == mine | theirs


def test_a_process_wide_listener_still_hears_every_app_and_is_deprecated(
    app: heartq.App, other_app: heartq.App
) -> None:
    """`heartq.events.add_listener`, deprecated: it warns, and hears the events of every
    app of the process (here each app's warning for a task no worker declared), until
    removed; an app's own listener hears only that app."""
    everywhere: list[tuple[str, dict[str, Any]]] = []
    own: list[str] = []

    def process_wide(event: str, fields: dict[str, Any]) -> None:
        everywhere.append((event, fields))

    app.events.subscribe(lambda event: own.append(event.fields.get("task", "")))
    with pytest.warns(DeprecationWarning, match=r"app\.events\.subscribe"):
        events.add_listener(process_wide)
    try:
        with pytest.warns(heartq.TaskNotDeclaredWarning):
            app.enqueue("first_unknown", {})
            other_app.enqueue("second_unknown", {})
    finally:
        events.remove_listener(process_wide)
    told = [f["task"] for n, f in everywhere if n == events.TASK_NOT_DECLARED]
    assert told == ["first_unknown", "second_unknown"]
    assert own == ["first_unknown"]
    with pytest.warns(heartq.TaskNotDeclaredWarning):
        app.enqueue("third_unknown", {})
    assert len(everywhere) == 2  # removed: hears no more
