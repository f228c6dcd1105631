"""A job behaves the same however it is enqueued: by the task, by name from a program
without the task code, before any worker declared it; arguments checked at the door;
`eta`; waiting for results; the async client. Both backends, a real worker."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import heartq
from heartq import events
from heartq.errors import JobCancelled, JobDead, ResultTimeout, TaskNotDeclared
from tests.conftest import on_every_backend
from tests.support import wait_for


@pytest.fixture
def producer(app: heartq.App) -> Iterator[heartq.App]:
    """Another program on the same queue that does not import the task code."""
    other = heartq.App(app.url, **_fast(app))
    yield other
    other.close()


def _fast(app: heartq.App) -> dict[str, Any]:
    s = app.settings
    return {"heartbeat_interval": s.heartbeat_interval, "lease": s.lease_seconds}


@pytest.fixture
def heard(app: heartq.App, producer: heartq.App) -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """Every event of the worker's app and of the producer's during the test."""
    seen: list[tuple[str, dict[str, Any]]] = []

    def listen(event: events.Event) -> None:
        seen.append((event.name, event.fields))

    for each in (app, producer):
        each.events.subscribe(listen)
    yield seen
    for each in (app, producer):
        each.events.unsubscribe(listen)


def register_cpu_tasks(app: heartq.App, calls: list[str]) -> None:
    @app.task(queue="cpu", max_retries=1, retry_backoff=0.1, priority=2, timeout=30)
    def cpu_sum(numbers: list[int]) -> int:
        calls.append("cpu_sum")
        return sum(numbers)

    @app.task(queue="cpu", max_retries=1, retry_backoff=0.1)
    def always_fails() -> None:
        calls.append("always_fails")
        raise ValueError("no luck")


def test_enqueue_by_name_takes_the_declared_queue_and_policy(
    app: heartq.App, producer: heartq.App, run_worker: Callable[..., Any]
) -> None:
    calls: list[str] = []
    register_cpu_tasks(app, calls)
    with run_worker(app, queues=["cpu"]):
        job_id = producer.enqueue("cpu_sum", {"numbers": [1, 2, 3]})
        job = producer.get_job(job_id)
        assert (job["queue"], job["max_retries"], job["priority"]) == ("cpu", 1, 2)
        assert job["retry_backoff"] == 0.1
        assert job["policy"]["queue"] == {"value": "cpu", "from": "task"}
        assert job["policy"]["timeout"] == {"value": 30, "from": "task"}
        assert producer.result(job_id, timeout=10) == 6

        failing = producer.enqueue("always_fails")
        # max_retries=1: two attempts 0.1 s apart, then dead (the default policy would
        # take four attempts and at least 3.75 s before the first retry)
        job = wait_for(
            lambda: (j := producer.get_job(failing))["status"] == "dead" and j,
            timeout=3,
            what="the job to die after its task's 2 attempts",
        )
        assert job["attempts"] == 2 and calls.count("always_fails") == 2


def test_a_job_of_an_undeclared_task_moves_to_its_queue_once_declared(
    app: heartq.App,
    producer: heartq.App,
    run_worker: Callable[..., Any],
    heard: list[tuple[str, dict[str, Any]]],
) -> None:
    job_id = producer.enqueue("cpu_sum", {"numbers": [4, 5]})
    chosen_id = producer.enqueue("cpu_sum", {"numbers": [1]}, max_retries=5, priority=-3)
    warnings = [f for e, f in heard if e == events.TASK_NOT_DECLARED]
    assert warnings and warnings[0]["task"] == "cpu_sum" and warnings[0]["queue"] == "default"
    job = producer.get_job(job_id)
    assert job["queue"] == "default"
    assert job["policy"]["queue"]["from"] == "defaults (task not declared yet)"
    assert job["policy"]["declared"] is False

    calls: list[str] = []
    register_cpu_tasks(app, calls)
    with run_worker(app, queues=["cpu"]):  # it never looks at `default`
        assert producer.result(job_id, timeout=10) == 9
        assert producer.result(chosen_id, timeout=10) == 1
    job = producer.get_job(job_id)
    assert (job["queue"], job["max_retries"], job["retry_backoff"]) == ("cpu", 1, 0.1)
    assert job["policy"]["max_retries"] == {"value": 1, "from": "task"}
    chosen = producer.get_job(chosen_id)
    assert (chosen["queue"], chosen["max_retries"], chosen["priority"]) == ("cpu", 5, -3)
    assert chosen["policy"]["max_retries"] == {"value": 5, "from": "caller"}
    assert chosen["policy"]["priority"]["from"] == "caller"
    declared = [f for e, f in heard if e == events.TASKS_DECLARED]
    assert declared and declared[0]["rerouted"] == 2


def test_a_changed_declaration_reroutes_waiting_jobs_but_not_chosen_queues(
    app: heartq.App, producer: heartq.App
) -> None:
    store = app.store
    first = heartq.App(app.url)
    register_cpu_tasks(first, [])
    assert store.declare_tasks([t.policy for t in first.tasks.values()], "w1") == [
        "cpu_sum",
        "always_fails",
    ]
    follows = producer.enqueue("cpu_sum", {"numbers": []}, delay=60)
    pinned = producer.enqueue("cpu_sum", {"numbers": []}, queue="pinned", delay=60)
    assert store.declare_tasks([first.tasks["cpu_sum"].policy], "w2") == []  # unchanged

    second = heartq.App(app.url)

    @second.task(name="cpu_sum", queue="gpu", max_retries=4)
    def cpu_sum(numbers: list[int]) -> int:
        return 0

    assert store.declare_tasks([cpu_sum.policy], "w3") == ["cpu_sum"]
    assert store.reroute_jobs(["cpu_sum"]) == 2
    assert (producer.get_job(follows)["queue"], producer.get_job(follows)["max_retries"]) == (
        "gpu",
        4,
    )
    assert producer.get_job(pinned)["queue"] == "pinned"
    assert store.task_policies(["cpu_sum"])["cpu_sum"].declared_by == "w3"
    first.close()
    second.close()


def test_strict_mode_refuses_an_undeclared_task_and_stores_nothing(
    app: heartq.App, producer: heartq.App
) -> None:
    strict = heartq.App(app.url, strict_tasks=True)
    try:
        with pytest.raises(TaskNotDeclared, match="'cpu_sum' is not declared"):
            strict.enqueue("cpu_sum", {"numbers": [1]})
        assert app.store.list_jobs() == []
        register_cpu_tasks(app, [])
        app.store.declare_tasks([t.policy for t in app.tasks.values()], "w1")
        job_id = strict.enqueue("cpu_sum", {"numbers": [1]})
        assert strict.get_job(job_id)["queue"] == "cpu"
    finally:
        strict.close()


def test_arguments_are_checked_at_enqueue_and_options_are_never_arguments(
    app: heartq.App,
) -> None:
    @app.task
    def crunch(name: str, n: int = 1, **extra: Any) -> None: ...

    @app.task
    def plain(ctx: heartq.JobContext, name: str) -> None: ...

    with pytest.raises(TypeError, match=r"task 'plain'.*unexpected keyword argument 'nmae'"):
        plain.enqueue(name="x", nmae="x")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="missing a required argument: 'name'"):
        plain.enqueue()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'delay'"):
        plain.enqueue(name="x", delay=5)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="'nmae'"):
        app.enqueue("plain", {"name": "x", "nmae": "x"})
    assert app.store.list_jobs() == []  # nothing of any of these was stored

    job = app.get_job(crunch.enqueue("x", 2, colour="red"))
    assert job["args"] == {"name": "x", "n": 2, "colour": "red"}
    before = app.store.clock()
    job = app.get_job(crunch.options(delay=30, priority=9).enqueue(name="y"))
    assert job["args"] == {"name": "y"} and job["priority"] == 9
    assert job["policy"]["priority"]["from"] == "caller"
    run_at = datetime.fromisoformat(job["run_at"]).timestamp()
    assert before + 29 < run_at < before + 32


def test_eta_sets_when_a_job_may_first_run(app: heartq.App) -> None:
    @app.task
    def later() -> None: ...

    eta = datetime.now(UTC) + timedelta(seconds=45)
    job = app.get_job(later.options(eta=eta).enqueue())
    assert abs(datetime.fromisoformat(job["run_at"]).timestamp() - eta.timestamp()) < 1.0
    past = app.get_job(app.enqueue("later", eta=eta - timedelta(days=1)))
    assert abs(datetime.fromisoformat(past["run_at"]).timestamp() - time.time()) < 5.0
    with pytest.raises(heartq.ConfigError, match="timezone-aware"):
        later.options(eta=datetime.now()).enqueue()
    with pytest.raises(heartq.ConfigError, match="either delay or eta"):
        app.enqueue("later", delay=5, eta=eta)
    assert len(app.store.list_jobs()) == 2


def test_an_eta_further_ahead_than_a_delay_may_be_is_refused(app: heartq.App) -> None:
    """A delay is at most ten years; an eta is a delay given as a time, so a year-9999 one
    is refused in one line, not cut to ten years without a word (as the store would)."""

    @app.task
    def later() -> None: ...

    far = datetime(9999, 1, 1, tzinfo=UTC)
    for enqueue in (
        lambda: later.options(eta=far).enqueue(),
        lambda: app.enqueue("later", eta=far),
    ):
        with pytest.raises(heartq.ConfigError) as caught:
            enqueue()
        assert str(caught.value) == (
            "eta must be at most 3.1536e+08 s (ten years) ahead, as a delay, got "
            "9999-01-01T00:00:00+00:00"
        )
    assert app.store.list_jobs() == []
    nine_years = datetime.now(UTC) + timedelta(days=9 * 365)
    job = app.get_job(later.options(eta=nine_years).enqueue())
    assert abs(datetime.fromisoformat(job["run_at"]).timestamp() - nine_years.timestamp()) < 1.0


@on_every_backend  # PostgreSQL hears ends (LISTEN); SQLite polls
def test_result_returns_or_says_why_not(app: heartq.App, run_worker: Callable[..., Any]) -> None:
    @app.task(max_retries=0)
    def double(x: int) -> int:
        return 2 * x

    @app.task(max_retries=0)
    def broken() -> None:
        raise RuntimeError("the disk is lava")

    with run_worker(app):
        assert app.result(double.enqueue(x=21), timeout=10) == 42
        with pytest.raises(JobDead, match="the disk is lava") as dead:
            app.result(broken.enqueue(), timeout=10)
        assert "RuntimeError" in (dead.value.error or "")
        waiting = double.options(delay=3600).enqueue(x=1)
        started = time.monotonic()
        with pytest.raises(ResultTimeout, match=r"did not end within 0\.3 s"):
            app.result(waiting, timeout=0.3)
        assert time.monotonic() - started < 3.0
        app.cancel(waiting)
        with pytest.raises(JobCancelled):
            app.result(waiting, timeout=5)
        with pytest.raises(heartq.JobNotFound):
            app.result("no-such-job", timeout=1)


@on_every_backend  # PostgreSQL hears ends (LISTEN); SQLite polls
def test_the_async_client_never_blocks_the_event_loop(
    app: heartq.App, run_worker: Callable[..., Any]
) -> None:
    @app.task
    def slow_square(x: int) -> int:
        time.sleep(0.5)
        return x * x

    async def main() -> tuple[list[int], int]:
        ticks = 0
        done = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0.01)

        tick_task = asyncio.create_task(ticker())
        first = await slow_square.enqueue_async(3)
        second = await app.enqueue_async("slow_square", {"x": 4})
        more = await app.enqueue_many_async("slow_square", [{"x": 5}])
        chosen = await slow_square.options(priority=1).enqueue_async(x=6)
        results = await asyncio.gather(
            *(app.result_async(i, timeout=15) for i in [first, second, *more, chosen])
        )
        done.set()
        await tick_task
        return list(results), ticks

    with run_worker(app):
        results, ticks = asyncio.run(main())
    assert results == [9, 16, 25, 36]
    assert ticks >= 20  # the loop kept turning while every wait was under way


@on_every_backend  # PostgreSQL hears ends (LISTEN); SQLite polls
def test_the_async_wait_times_out(app: heartq.App) -> None:
    """ResultTimeout is a TimeoutError: the async waiter must not take its own deadline
    for a wake-up timeout and wait on forever."""

    @app.task
    def never_run() -> None:
        """Delayed an hour: nothing runs it within the test."""

    waiting = never_run.options(delay=3600).enqueue()

    async def wait(timeout: float) -> float:
        started = time.monotonic()
        with pytest.raises(ResultTimeout, match="it is queued"):
            await asyncio.wait_for(app.result_async(waiting, timeout=timeout), 10)
        return time.monotonic() - started

    assert asyncio.run(wait(0)) < 2.0
    assert 0.3 <= asyncio.run(wait(0.3)) < 3.0


def test_not_declared_warning_is_logged(
    producer: heartq.App, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="heartq"):
        producer.enqueue("nobody_runs_this")
    assert [r.getMessage() for r in caplog.records] == [events.TASK_NOT_DECLARED]
