"""Attempts that could not run their task's code, through a real worker on both backends:
arguments that do not bind are dead after exactly one attempt (while a `TypeError` the
task's own code raises is retried); a task no worker declared is dead after one attempt;
a task another worker declared waits, uncounted, for a worker that knows it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import heartq
from heartq.lifecycle import fate
from tests.support import wait_for


@pytest.fixture
def producer(app: heartq.App) -> Iterator[heartq.App]:
    """Another program on the same queue that does not import the task code."""
    other = heartq.App(app.url)
    yield other
    other.close()


def outcomes(app: heartq.App, job_id: str) -> list[str]:
    return [e["outcome"] for e in app.get_job(job_id)["executions"]]


def wait_status(app: heartq.App, job_id: str, status: str, timeout: float = 10.0) -> None:
    """Wait for the job to reach `status`; on timeout, say how far it got."""
    try:
        wait_for(lambda: app.get_job(job_id)["status"] == status, timeout, f"status {status}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; executions: {app.get_job(job_id)['executions']}") from None


@pytest.mark.parametrize("pool", ["thread", "async"])
def test_arguments_that_cannot_bind_are_dead_after_exactly_one_attempt(
    app: heartq.App, producer: heartq.App, run_worker: Callable[..., Any], pool: str
) -> None:
    calls: list[str] = []

    @app.task(max_retries=3, retry_backoff=0.05)
    def greet(name: str) -> str:
        calls.append(name)
        return name

    @app.task(max_retries=3, retry_backoff=0.05)
    async def greet_async(name: str) -> str:
        calls.append(name)
        return name

    heard: list[tuple[str | None, bool]] = []

    @app.hooks.attempt
    def listen(attempt: heartq.AttemptInfo) -> Iterator[None]:
        yield
        heard.append((attempt.outcome, attempt.will_retry))

    task = "greet_async" if pool == "async" else "greet"
    with pytest.warns(heartq.TaskNotDeclaredWarning):  # nothing to check it against yet
        job_id = producer.enqueue(task, {"nmae": "x"})
    with run_worker(app, pool=pool):
        wait_status(app, job_id, "dead")
    job = app.get_job(job_id)
    assert (job["attempts"], outcomes(app, job_id), calls) == (1, ["failed"], [])
    assert heard == [("failed", False)]  # the attempt hooks are told it will not retry
    assert job["dead_reason"] == (
        f"its arguments do not fit the task, not retried: BadArguments: task {task!r}: "
        "missing a required argument: 'name'; got an unexpected keyword argument 'nmae'"
    )
    assert job["args"] == {"nmae": "x"}  # kept: replayable once fixed


@pytest.mark.parametrize("pool", ["thread", "async"])
def test_a_type_error_the_tasks_code_raises_is_retried(
    app: heartq.App, run_worker: Callable[..., Any], pool: str
) -> None:
    """Told apart by where it came from, not by its text: this one even reads like a
    binding error."""

    @app.task(max_retries=2, retry_backoff=0.05)
    def adds(a: int) -> int:
        if a > 0:
            raise TypeError("adds() got an unexpected keyword argument 'nmae'")
        return a

    job_id = adds.enqueue(a=1)
    with run_worker(app, pool=pool):
        wait_status(app, job_id, "dead")
    job = app.get_job(job_id)
    assert (job["attempts"], outcomes(app, job_id)) == (3, ["failed"] * 3)
    assert job["dead_reason"] == (
        "failed 3 attempts; last error: TypeError: adds() got an unexpected keyword argument "
        "'nmae'"
    )


def test_a_task_no_worker_declared_is_dead_after_exactly_one_attempt(
    app: heartq.App, producer: heartq.App, run_worker: Callable[..., Any]
) -> None:
    with pytest.warns(heartq.TaskNotDeclaredWarning):
        job_id = producer.enqueue("nobody_knows_me", {"x": 1})  # 3 retries: none spent
    with run_worker(app, queues=["default"]):
        wait_status(app, job_id, "dead")
    job = app.get_job(job_id)
    assert (job["attempts"], outcomes(app, job_id)) == (1, ["failed"])
    assert job["dead_reason"] == (
        "unknown task 'nobody_knows_me': no worker has declared it (replay the job once a "
        "worker that registers it has started)"
    )
    assert "UnknownTask: task 'nobody_knows_me' is not registered" in job["error"]
    assert job["args"] == {"x": 1}


def test_a_task_declared_elsewhere_waits_for_a_worker_that_knows_it(
    app: heartq.App, producer: heartq.App, run_worker: Callable[..., Any]
) -> None:
    """A rolling deploy: the new version declared `resize`, a worker of the old version
    (which does not know it) claims its job first. The job is given back uncounted, and
    not claimed again at once (no busy loop); a worker of the new version runs it once
    its wait is over."""
    knows = heartq.App(app.url, **_settings(app))

    @knows.task(max_retries=0)
    def resize(width: int) -> int:
        return width * 2

    try:
        with run_worker(knows):
            pass  # the new version declared `resize`, then stopped
        job_id = producer.enqueue("resize", {"width": 21})
        with run_worker(app, queues=["default"]):  # the old version: no `resize`
            wait_for(lambda: outcomes(app, job_id) == ["released"], 10, "a wait for the task")
            given_back = time.monotonic()
            wait_for(lambda: time.monotonic() - given_back > 1.0, 5, "a second to pass")
            assert outcomes(app, job_id) == ["released"]  # not claimed again meanwhile
        job = app.get_job(job_id)
        assert (job["status"], job["attempts"]) == ("queued", 0)
        assert "UnknownTask: task 'resize' is not registered" in job["executions"][0]["error"]
        with run_worker(knows):  # max_retries=0: an attempt counted would have been its last
            wait_status(app, job_id, "succeeded", timeout=fate.WAIT_FOR_TASK * 1.25 + 15)
        job = app.get_job(job_id)
        assert job["result"] == 42 and job["attempts"] == 1
        assert outcomes(app, job_id)[-1] == "succeeded"
        assert set(outcomes(app, job_id)[:-1]) == {"released"}
    finally:
        knows.close()


def _settings(app: heartq.App) -> dict[str, Any]:
    s = app.settings
    return {"heartbeat_interval": s.heartbeat_interval, "lease": s.lease_seconds}
