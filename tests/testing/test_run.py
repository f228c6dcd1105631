"""`heartq.testing.run`: one attempt of one job on a real worker, on the backends of a layer
(tests/testing/conftest.py; a task's transaction on both): its
result after the JSON round trip, what its code raised, a real `JobContext`, and nothing
else run with it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import heartq
from heartq.model import JobStatus
from heartq.testing import AttemptFailed, drain, enqueued, run, run_attempt
from tests.conftest import on_every_backend


def test_run_returns_the_result_as_stored(app: heartq.App) -> None:
    @app.task
    def shape(name: str, sides: int = 4) -> dict[str, Any]:
        return {"name": name, "corners": (sides, sides)}  # a tuple stored as a JSON list

    assert run(shape, "square") == {"name": "square", "corners": [4, 4]}
    (job,) = enqueued(app, shape, status="any")
    assert (job.status, job.args) == (JobStatus.SUCCEEDED, {"name": "square"})  # as bound


def test_run_gives_the_task_a_real_context(app: heartq.App) -> None:
    @app.task(max_retries=2)
    def inspect(ctx: heartq.JobContext, n: int) -> dict[str, Any]:
        ctx.heartbeat(progress=0.5, stage="half", checkpoint={"n": n})
        return {
            "attempt": ctx.attempt,
            "max_retries": ctx.max_retries,
            "meta": dict(ctx.meta),
            "queue": ctx.queue,
            "job_id": ctx.job_id,
        }

    seen = run(inspect.options(meta={"tenant": "acme"}), n=3)
    (job,) = enqueued(app, inspect, status="any")
    assert seen == {
        "attempt": 1,
        "max_retries": 2,
        "meta": {"tenant": "acme"},
        "queue": job.queue,
        "job_id": job.id,
    }
    assert job.queue.startswith("heartq-testing-run-")
    stored = app.get_job(job.id)
    assert (stored["progress"]["stage"], stored["checkpoint"]) == ("half", {"n": 3})


@on_every_backend
def test_run_commits_a_task_transaction(app: heartq.App) -> None:
    app.migrate()

    @app.task
    def count(ctx: heartq.JobContext) -> int:
        with ctx.transaction() as conn:
            row = conn.execute("SELECT 41 + 1 AS n").fetchone()
        return int(row["n"] if isinstance(row, dict) else row[0])  # psycopg: dicts

    assert run(count) == 42


@on_every_backend
def test_run_returns_a_result_handed_to_the_commit_and_raises_for_one_lost(
    app: heartq.App,
) -> None:
    """A task that hands its result to its transaction's commit keeps it whatever its
    code does after; one whose code fails after a commit that carried no result has none:
    `run` raises what the code raised, and the report says the result was lost."""
    app.migrate()

    @app.task
    def total(ctx: heartq.JobContext, hand: bool) -> int:
        with ctx.transaction() as conn:
            row = conn.execute("SELECT 41 + 1 AS n").fetchone()
            n = int(row["n"] if isinstance(row, dict) else row[0])
            if hand:
                ctx.commit_result(n)
        raise ValueError("after the commit")

    assert run(total, hand=True) == 42
    with pytest.raises(ValueError, match="after the commit") as caught:
        run(total, hand=False)
    (note,) = caught.value.__notes__
    assert "[succeeded] -> succeeded: result lost (the task's code ended failed" in note
    (lost,) = [j for j in enqueued(app, total, status="any") if j.args == {"hand": False}]
    assert "ValueError: after the commit" in app.get_job(lost.id)["result_lost"]


def test_run_raises_what_the_code_raised_and_leaves_the_job_as_the_attempt_did(
    app: heartq.App,
) -> None:
    calls: list[int] = []

    @app.task(max_retries=3, retry_backoff=0)  # the retry is due at once: still not run
    def broken(ctx: heartq.JobContext, n: int) -> None:
        calls.append(ctx.attempt)
        raise KeyError(f"no item {n}")

    with pytest.raises(KeyError, match="no item 5") as caught:
        run(broken, 5)

    assert calls == [1]
    (job,) = enqueued(app, broken)
    assert (job.status, job.attempts) == (JobStatus.QUEUED, 1)
    assert caught.value.__notes__ == [
        f"heartq.testing.run: {job.id}  broken(n=5)  queue={job.queue}  [failed] -> queued: "
        f"next attempt at {job.run_at}"
    ]
    # The rest of its attempts: a drain with retries due now.
    (rest,) = drain(app, run_retries_now=True)
    assert rest.outcomes == ["failed", "failed", "failed"] and calls == [1, 2, 3, 4]


def test_an_attempt_that_raised_nothing_here_is_attempt_failed(app: heartq.App) -> None:
    @app.task
    def unstorable() -> object:
        return object()  # not JSON: the job fails at once, for good

    with pytest.raises(AttemptFailed) as caught:
        run(unstorable)
    failed = caught.value.job
    assert (failed.status, failed.outcomes) == (JobStatus.DEAD, ["failed"])
    assert str(caught.value).startswith("unstorable: attempt 1 failed (PayloadError: result")


def test_run_runs_nothing_else(app: heartq.App) -> None:
    @app.task
    def other() -> None: ...

    @app.task
    def mine() -> str:
        return "mine"

    waiting = other.enqueue()
    assert run(mine) == "mine"
    assert app.get_job(waiting)["status"] == JobStatus.QUEUED


def test_run_refuses_what_would_never_run_in_one_line(app: heartq.App) -> None:
    @app.task
    def later() -> None: ...

    with pytest.raises(ValueError, match=r"run\(\) runs the job now: leave out delay="):
        run(later.options(delay=60))
    with pytest.raises(ValueError, match=r"leave out connection="):
        run(later.options(connection=object()))
    with pytest.raises(TypeError, match="got an unexpected keyword argument 'nope'"):
        run(later, nope=1)  # type: ignore[call-arg]
    keyed = later.options(unique_key="k").enqueue()
    with pytest.raises(ValueError, match=f"nothing was enqueued: job {keyed} holds the unique"):
        run(later.options(unique_key="k"))
    assert [job.id for job in enqueued(app)] == [keyed]


def test_what_would_end_a_thread_or_the_test_run_is_the_attempts_outcome(
    app: heartq.App,
) -> None:
    """`KeyboardInterrupt` or `SystemExit` raised by a task ends its attempt `failed`
    (never a `DrainTimeout`), and `run` raises `AttemptFailed` caused by it rather than
    the exception itself, which would stop pytest."""

    @app.task(max_retries=0)
    def interrupts(kind: str) -> None:
        raise KeyboardInterrupt if kind == "interrupt" else SystemExit(3)

    with pytest.raises(AttemptFailed) as failed:
        run(interrupts, "interrupt")
    assert isinstance(failed.value.__cause__, KeyboardInterrupt)
    assert failed.value.job.status is JobStatus.DEAD

    job_id = interrupts.enqueue("exit")
    report = drain(app)
    assert report.job(job_id).status is JobStatus.DEAD
    assert "SystemExit: 3" in (app.get_job(job_id)["executions"][0]["error"] or "")


def test_run_attempt_runs_a_later_attempt_as_a_worker_would(app: heartq.App) -> None:
    """`ctx.attempt` and `ctx.max_retries` say which attempt it is; a failure of one with
    retries left is retried, of the last is dead; the attempt hooks' `will_retry` and
    the job's history agree, and no earlier attempt ran the task's code."""
    seen: list[tuple[int, int]] = []
    hooks: list[tuple[int, bool]] = []

    @app.hooks.attempt
    def record(attempt: heartq.AttemptInfo) -> Iterator[None]:
        yield
        hooks.append((attempt.attempt, attempt.will_retry))

    @app.task(max_retries=2, retry_backoff=600)
    def charge(ctx: heartq.JobContext, order: int) -> str:
        seen.append((ctx.attempt, ctx.max_retries))
        if ctx.attempt > ctx.max_retries:  # the last attempt: give up gracefully
            return "refunded"
        raise TimeoutError(f"order {order}: the bank timed out")

    assert run_attempt(3, charge, order=7) == "refunded"
    with pytest.raises(TimeoutError, match="order 8"):
        run_attempt(2, charge, 8)
    assert run_attempt(1, charge.options(max_retries=0), order=9) == "refunded"

    assert seen == [(3, 2), (2, 2), (1, 0)] and hooks == [(3, False), (2, True), (1, False)]
    last, retried, only = enqueued(app, charge, status="any")
    assert (last.status, last.attempts) == (JobStatus.SUCCEEDED, 3)
    assert (retried.status, retried.attempts) == (JobStatus.QUEUED, 2)  # waits out its retry
    assert len(app.get_job(retried.id)["executions"]) == 1  # the one attempt that ran
    assert (only.status, only.attempts) == (JobStatus.SUCCEEDED, 1)

    @app.task(max_retries=1)
    def fails() -> None:
        raise KeyError("gone")

    with pytest.raises(KeyError):
        run_attempt(2, fails)
    (dead,) = enqueued(app, fails, status="dead")
    assert dead.attempts == 2
    assert [e["execution_id"] for e in app.get_job(dead.id)["executions"]] == [2]


def test_run_attempt_refuses_an_attempt_no_worker_would_run(app: heartq.App) -> None:
    @app.task(max_retries=2)
    def task() -> None: ...

    with pytest.raises(ValueError, match=r"^attempt 4: a job of task 'task' makes at most 3 "):
        run_attempt(4, task)
    with pytest.raises(ValueError, match=r"at most 6 \(max_retries=5\)"):
        run_attempt(7, task.options(max_retries=5))
    for bad in (0, -1, True, 2.0):
        with pytest.raises(ValueError, match="attempt must be a whole number from 1"):
            run_attempt(bad, task)  # type: ignore[arg-type]
    assert enqueued(app, status="any") == []
