"""A task's retry policy through a real worker: which exceptions are retried
(`retry_on`, `dont_retry_on`, also for jobs enqueued by name), the exact waits of a
constant or linear schedule without jitter, explicit `retry_intervals`, and a
`retry_delay` function asked by the worker (its failures falling back, and told)."""

from __future__ import annotations

from datetime import datetime

import pytest

import heartq
from heartq.event_stream import Event
from tests.conftest import on_every_backend
from tests.support import wait_for

from .test_outcomes import wait_status


class Flaky(Exception):
    """An exception of the tests' own, named in a declaration as `tests...Flaky`."""


def test_retry_on_retries_those_exceptions_only(app: heartq.App, run_worker) -> None:
    seen: list[str] = []

    @app.task(max_retries=3, retry_backoff=0.01, retry_on=(TimeoutError, Flaky))
    def fetch(kind: str) -> str:
        seen.append(kind)
        if kind == "timeout" and seen.count("timeout") == 1:
            raise TimeoutError("slow upstream")
        if kind == "missing":
            raise KeyError("id")
        return "ok"

    retried = fetch.enqueue(kind="timeout")
    not_listed = fetch.enqueue(kind="missing")
    with run_worker(app):
        wait_status(app, retried, "succeeded")
        wait_status(app, not_listed, "dead")
    assert app.get_job(retried)["attempts"] == 2
    dead = app.get_job(not_listed)
    assert dead["attempts"] == 1  # a KeyError is not in retry_on: no second attempt
    assert dead["dead_reason"] == "permanent failure: KeyError: 'id'"


def test_dont_retry_on_wins_and_holds_for_subclasses(app: heartq.App, run_worker) -> None:
    class Gone(LookupError):
        pass

    @app.task(
        max_retries=2, retry_backoff=0.01, retry_on=(Exception,), dont_retry_on=LookupError
    )
    def sync(kind: str) -> None:
        raise Gone("deleted") if kind == "gone" else ValueError("bad")

    gone = sync.enqueue(kind="gone")
    bad = sync.enqueue(kind="bad")
    with run_worker(app):
        wait_status(app, gone, "dead")
        wait_status(app, bad, "dead")
    assert app.get_job(gone)["attempts"] == 1
    assert app.get_job(bad)["attempts"] == 3  # retried twice, then out of retries


def test_jobs_enqueued_by_name_follow_the_declared_filter(app: heartq.App, run_worker) -> None:
    """A client without the task's code enqueues by name; the worker's declaration holds
    the filter (readable by anyone) and its worker applies it."""

    @app.task(name="charge", max_retries=3, retry_backoff=0.01, dont_retry_on=(Flaky,))
    def charge() -> None:
        raise Flaky("card declined")

    with run_worker(app):
        wait_for(lambda: "charge" in app.store.task_policies(), 10, what="declared")
        declared = app.store.task_policies()["charge"]
        assert declared.dont_retry_on == (f"{__name__}.Flaky",)
        assert declared.retry_on is None
        client = heartq.App(app.url)
        try:
            job_id = client.enqueue("charge", {})
        finally:
            client.close()
        wait_status(app, job_id, "dead")
    assert app.get_job(job_id)["attempts"] == 1


def _wait_after(app: heartq.App, job_id: str, attempts: int) -> float:
    """Seconds between the end of attempt `attempts` and the run_at of the next one."""

    def retried() -> bool:
        job = app.get_job(job_id)
        return job["status"] == "queued" and job["attempts"] == attempts

    wait_for(retried, 10, what=f"attempt {attempts} failed")
    job = app.get_job(job_id)
    run_at = datetime.fromisoformat(job["run_at"])
    return (run_at - datetime.fromisoformat(job["executions"][-1]["ended_at"])).total_seconds()


@pytest.mark.parametrize(
    ("schedule", "waits"),
    [("constant", [30.0, 30.0, 30.0]), ("linear", [30.0, 60.0, 90.0]),
     ("exponential", [30.0, 60.0, 100.0])],
)  # fmt: skip
def test_schedules_without_jitter_wait_exactly(
    app: heartq.App, run_worker, schedule: str, waits: list[float]
) -> None:
    @app.task(
        max_retries=3,
        retry_backoff=30,
        retry_backoff_max=100,
        retry_schedule=schedule,
        retry_jitter=False,
    )
    def always_fails() -> None:
        raise Flaky("no")

    job_id = always_fails.enqueue()
    seen = []
    with run_worker(app):
        for attempt in (1, 2, 3):
            seen.append(_wait_after(app, job_id, attempt))
            app.store.retry_now(["default"])
        wait_status(app, job_id, "dead")
    assert seen == pytest.approx(waits, abs=0.002)  # times are shown to the millisecond


def test_jitter_spreads_waits_by_default(app: heartq.App, run_worker) -> None:
    # the cap well above the wait: a wait spread above a cap equal to it is cut back to
    # the cap (half the draws), and four such waits were all 30.0 once in 16 runs
    @app.task(max_retries=1, retry_backoff=30, retry_backoff_max=100)
    def fails() -> None:
        raise Flaky("no")

    ids = [fails.enqueue() for _ in range(4)]
    with run_worker(app):
        waits = [_wait_after(app, job_id, 1) for job_id in ids]
    assert all(22.5 - 0.01 <= w <= 37.5 + 0.01 for w in waits), waits
    assert len({round(w, 3) for w in waits}) > 1, waits


def test_bad_retry_options_are_refused_at_definition(app: heartq.App) -> None:
    with pytest.raises(heartq.ConfigError, match=r"^retry_schedule must be one of"):
        app.task(retry_schedule="fibonacci")(lambda: None)
    with pytest.raises(heartq.ConfigError, match=r"^retry_on must be exception classes"):
        app.task(retry_on=("TimeoutError",))(lambda: None)  # type: ignore[arg-type]
    with pytest.raises(heartq.ConfigError, match=r"^retry_jitter must be True or False"):
        app.task(retry_jitter="no")(lambda: None)  # type: ignore[arg-type]


def test_a_misspelt_task_option_is_refused_in_one_line(app: heartq.App) -> None:
    """The options are written once, as a TypedDict a type checker reads: the definition
    refuses one it does not know, naming those it takes, rather than ignore it."""
    with pytest.raises(heartq.ConfigError, match=r"^unknown task option 'max_retry'; a task"):
        app.task(max_retry=3)(lambda: None)  # type: ignore[call-overload]


@on_every_backend  # the intervals are declared, and read back, on each backend
def test_retry_intervals_wait_as_listed_the_last_repeated(app: heartq.App, run_worker) -> None:
    @app.task(max_retries=4, retry_intervals=[30, 90, 45])
    def always_fails() -> None:
        raise Flaky("no")

    job_id = always_fails.enqueue()
    seen = []
    with run_worker(app):
        for attempt in (1, 2, 3, 4):
            seen.append(_wait_after(app, job_id, attempt))
            app.store.retry_now(["default"])
        wait_status(app, job_id, "dead")
        declared = app.store.task_policies()["always_fails"]
    assert seen == pytest.approx([30.0, 90.0, 45.0, 45.0], abs=0.002)  # exact: no jitter
    assert (declared.retry_intervals, declared.retry_jitter) == ((30.0, 90.0, 45.0), False)
    assert app.get_job(job_id)["attempts"] == 5  # max_retries=4: five attempts in all


class RateLimited(Exception):
    def __init__(self, retry_after: float) -> None:
        super().__init__(f"429, retry after {retry_after} s")
        self.retry_after = retry_after


@on_every_backend  # enqueued by name from a client without the task's code
def test_retry_delay_is_asked_by_the_worker_and_falls_back_when_it_fails(
    app: heartq.App, run_worker
) -> None:
    """The function is the task definition's, in the worker that runs the attempt: the
    client that enqueued the job by name has no code of it. An answer of None, an
    exception of its own or an answer that is no wait leaves the wait to the task's
    intervals; the last two are told (`retry_delay_failed`)."""
    asked: list[tuple[int, str]] = []

    def wait(attempt: int, exc: BaseException) -> float | None:
        asked.append((attempt, type(exc).__name__))
        if isinstance(exc, RateLimited):
            return exc.retry_after * attempt
        if isinstance(exc, KeyError):
            raise RuntimeError("no rule for this one")
        if isinstance(exc, LookupError):
            return float("nan")
        return None

    @app.task(name="call_partner", max_retries=2, retry_intervals=[40], retry_delay=wait)
    def call_partner(kind: str) -> None:
        raise {
            "busy": RateLimited(7.0),
            "other": ValueError("bad"),
            "broken": KeyError("id"),
            "nan": IndexError("0"),
        }[kind]

    told: list[Event] = []
    app.events.subscribe(told.append, names=["retry_delay_failed"])
    kinds = ("busy", "other", "broken", "nan")
    with run_worker(app):
        wait_for(lambda: "call_partner" in app.store.task_policies(), 10, what="declared")
        client = heartq.App(app.url)
        try:
            ids = {kind: client.enqueue("call_partner", {"kind": kind}) for kind in kinds}
        finally:
            client.close()
        first = {kind: _wait_after(app, ids[kind], 1) for kind in kinds}
        app.store.retry_now(["default"])
        second = {kind: _wait_after(app, ids[kind], 2) for kind in kinds}
        app.store.retry_now(["default"])  # every one waits out its second backoff now
        for job_id in ids.values():
            wait_status(app, job_id, "dead")
    assert first == pytest.approx({"busy": 7.0, "other": 40, "broken": 40, "nan": 40}, abs=0.002)
    assert second == pytest.approx({"busy": 14.0, "other": 40, "broken": 40, "nan": 40}, abs=0.002)
    # asked after attempts 1 and 2 (retries left), never after the last one
    raised = ("RateLimited", "ValueError", "KeyError", "IndexError")
    assert sorted(asked) == sorted((n, name) for n in (1, 2) for name in raised)
    failed = {e.fields["job_id"]: e.fields for e in told}
    assert set(failed) == {ids["broken"], ids["nan"]}
    assert failed[ids["broken"]]["error"] == "retry_delay raised RuntimeError: no rule for this one"
    assert failed[ids["nan"]]["error"] == (
        "retry_delay returned nan, which is not a finite number of seconds, zero or more"
    )
    assert failed[ids["nan"]]["retry_in"] == 40.0


def test_bad_retry_intervals_and_delays_are_refused_in_one_line(app: heartq.App) -> None:
    refusals = [
        ({"retry_intervals": []}, "retry_intervals must be a non-empty list of seconds, like "
         "[1, 10, 60], got []"),
        ({"retry_intervals": 60}, "retry_intervals must be a non-empty list of seconds, like "
         "[1, 10, 60], got 60"),
        ({"retry_intervals": [1, -5]}, "retry_intervals must be seconds, like [1, 10, 60]: -5 "
         "is not a finite number of seconds, zero or more"),
        ({"retry_intervals": [1, "10"]}, "retry_intervals must be seconds, like [1, 10, 60]: "
         "'10' is not a number"),
        ({"retry_intervals": [1], "retry_backoff": 5}, "t: retry_intervals replaces "
         "retry_backoff: give one or the other"),
        ({"retry_intervals": [1], "retry_schedule": "linear"}, "t: retry_intervals replaces "
         "retry_schedule: give one or the other"),
        ({"retry_delay": 10}, "retry_delay must be a function of (attempt, exc) that returns "
         "seconds or None, like lambda attempt, exc: 10 * attempt; 10 is not callable"),
    ]  # fmt: skip
    for options, message in refusals:
        with pytest.raises(heartq.ConfigError) as refused:
            app.task(name="t", **options)(lambda: None)
        assert str(refused.value) == message
    with pytest.raises(heartq.ConfigError, match=r"does not take \(attempt, exc\)$"):
        app.task(retry_delay=lambda attempt: 1.0)(lambda: None)  # type: ignore[arg-type]
