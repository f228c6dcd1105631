"""`heartq.testing.drain`: every due job run by a real worker in this process, on the
backends of a layer (tests/testing/conftest.py; a task's transaction and a wait on another
worker on both), and reported as the database stored it: successes, failures waiting out their
retry, retries made due at once, the dead-letter queue, `ctx.transaction()`,
checkpoints handed to the next attempt, jobs enqueued by jobs, a timeout."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import heartq
from heartq.display import epoch_of
from heartq.model import JobStatus, Outcome
from heartq.testing import DrainTimeout, drain, enqueued
from tests.conftest import on_every_backend


def test_a_drain_runs_every_due_job_and_reports_it(app: heartq.App) -> None:
    @app.task
    def add(a: int, b: int) -> int:
        return a + b

    @app.task(queue="other")
    def pair(x: str) -> tuple[str, str]:
        return (x, x)  # stored as JSON: a list comes back

    first = add.enqueue(1, b=2)
    second = pair.enqueue("y")
    report = drain(app)

    assert [run.id for run in report] == [first, second]  # claim order: oldest first
    one, two = report
    assert (one.task, one.args, one.queue) == ("add", {"a": 1, "b": 2}, "default")
    assert (one.status, one.result, one.outcomes) == (JobStatus.SUCCEEDED, 3, ["succeeded"])
    assert [(a.number, a.outcome) for a in one.attempts] == [(1, Outcome.SUCCEEDED)]
    assert (two.queue, two.result) == ("other", ["y", "y"])
    assert report.job(second) is two and report.of(pair) == [two] and report.of("add") == [one]
    assert f"{first}  add(a=1, b=2)  queue=default  [succeeded] -> succeeded: result 3" in str(
        report
    )
    assert app.get_job(first)["status"] == JobStatus.SUCCEEDED
    assert len(drain(app)) == 0  # nothing left to run


def test_a_failure_waiting_out_its_retry_is_left_queued(app: heartq.App) -> None:
    @app.task(max_retries=2)  # the default backoff: 5 s before the retry
    def fails(n: int) -> None:
        raise ValueError(f"bad n {n}")

    job_id = fails.enqueue(n=4)
    started = time.monotonic()
    (run,) = drain(app)

    assert time.monotonic() - started < 4, "the drain waited for the retry's backoff"
    assert (run.status, run.outcomes) == (JobStatus.QUEUED, ["failed"])
    assert isinstance(run.exception, ValueError) and str(run.exception) == "bad n 4"
    assert "ValueError: bad n 4" in (run.attempts[0].error or "")
    stored = app.get_job(job_id)
    assert (stored["status"], stored["attempts"]) == ("queued", 1)
    assert run.run_at == stored["run_at"]
    assert (epoch_of(run.run_at) or 0) > app.store.clock()  # its retry is still ahead
    assert "[failed] -> queued: next attempt at" in str(run)


def test_run_retries_now_runs_each_job_to_its_end_with_its_own_count(app: heartq.App) -> None:
    @app.task(max_retries=3)  # backoffs of 5, 10 and 20 s, all skipped
    def flaky(ctx: heartq.JobContext) -> int:
        if ctx.attempt < 3:
            raise ConnectionError(f"attempt {ctx.attempt}")
        return ctx.attempt

    @app.task(max_retries=1)
    def hopeless() -> None:
        raise RuntimeError("never")

    good = flaky.enqueue()
    bad = hopeless.enqueue()
    started = time.monotonic()
    report = drain(app, run_retries_now=True)

    assert time.monotonic() - started < 10
    assert report.job(good).outcomes == ["failed", "failed", "succeeded"]
    assert [a.number for a in report.job(good).attempts] == [1, 2, 3]
    assert report.job(good).result == 3
    dead = report.job(bad)
    assert (dead.status, dead.outcomes) == (JobStatus.DEAD, ["failed", "failed"])
    assert dead.dead_reason == "failed 2 attempts; last error: RuntimeError: never"
    assert app.get_job(bad)["status"] == JobStatus.DEAD


def test_run_retries_now_runs_a_retry_left_by_an_earlier_drain(app: heartq.App) -> None:
    @app.task(max_retries=1)
    def twice(ctx: heartq.JobContext) -> str:
        if ctx.attempt == 1:
            raise ValueError("first")
        return "second"

    job_id = twice.enqueue()
    assert drain(app).job(job_id).status == JobStatus.QUEUED
    (run,) = drain(app, run_retries_now=True)
    assert (run.outcomes, run.attempts[0].number, run.result) == (["succeeded"], 2, "second")


def test_permanent_failures_go_to_the_dead_letter_queue_at_once(app: heartq.App) -> None:
    @app.task(max_retries=5)
    def refuse() -> None:
        raise heartq.Permanent("no such customer")

    refuse.enqueue()
    (run,) = drain(app, run_retries_now=True)
    assert (run.status, run.outcomes) == (JobStatus.DEAD, ["failed"])
    assert run.dead_reason == "permanent failure: heartq.errors.Permanent: no such customer"
    assert isinstance(run.exception, heartq.Permanent)


@on_every_backend
def test_a_task_transaction_commits_its_effects_with_the_job(app: heartq.App) -> None:
    table = _table_in_queue_database(app, "effects")

    @app.task
    def record(ctx: heartq.JobContext, value: int) -> int:
        with ctx.transaction() as conn:
            mark = "%s" if app.url.startswith("postgres") else "?"
            conn.execute(f"INSERT INTO {table} (value) VALUES ({mark})", (value,))
        return value * 10

    job_id = record.enqueue(value=7)
    (run,) = drain(app)

    assert (run.id, run.status, run.result) == (job_id, JobStatus.SUCCEEDED, 70)
    assert _values(app, table) == [7]


def test_a_checkpoint_reaches_the_next_attempt(app: heartq.App) -> None:
    seen: list[Any] = []

    @app.task(max_retries=1)
    def resumable(ctx: heartq.JobContext) -> dict[str, Any]:
        seen.append(ctx.checkpoint)
        if ctx.attempt == 1:
            ctx.heartbeat(progress=0.5, checkpoint={"done": 5})
            raise RuntimeError("crashed half way")
        return {"resumed_from": ctx.checkpoint}

    resumable.enqueue()
    (run,) = drain(app, run_retries_now=True)

    assert seen == [None, {"done": 5}]
    assert run.result == {"resumed_from": {"done": 5}}


def test_jobs_enqueued_by_jobs_run_in_the_same_drain(app: heartq.App) -> None:
    @app.task
    def fan_out(n: int) -> int:
        for i in range(n):
            leaf.enqueue(i=i)
        return n

    @app.task(queue="leaves")
    def leaf(i: int) -> int:
        return i * i

    fan_out.enqueue(n=3)
    report = drain(app)

    assert [(run.task, run.result) for run in report] == [
        ("fan_out", 3),
        ("leaf", 0),
        ("leaf", 1),
        ("leaf", 4),
    ]


def test_only_due_jobs_of_the_queues_drained_run(app: heartq.App) -> None:
    @app.task
    def work(tag: str) -> str:
        return tag

    now = work.enqueue("now")
    later = work.options(delay=3600).enqueue("later")
    chosen = work.options(queue="urgent").enqueue("urgent")
    by_name = app.enqueue("not_registered_here", {}, queue="elsewhere")

    assert [run.id for run in drain(app, queues=["urgent"])] == [chosen]
    assert [run.id for run in drain(app)] == [now]  # a queue chosen at enqueue is drained too
    statuses = {job.id: job.status for job in enqueued(app)}
    assert statuses[later] == statuses[by_name] == JobStatus.QUEUED


def test_a_queue_chosen_at_enqueue_is_drained_by_default(app: heartq.App) -> None:
    @app.task
    def work() -> str:
        return "done"

    job_id = work.options(queue="urgent").enqueue()
    assert [run.id for run in drain(app)] == [job_id]


def test_a_drain_that_times_out_says_what_was_left(app: heartq.App) -> None:
    release = threading.Event()

    @app.task
    def stuck() -> str:
        assert release.wait(30)
        return "late"

    @app.task
    def waiting() -> None: ...

    stuck_id = stuck.enqueue()
    waiting_id = waiting.enqueue()
    try:
        with pytest.raises(DrainTimeout) as caught:
            drain(app, timeout=1.0)
    finally:
        release.set()

    assert [job.id for job in caught.value.pending] == [stuck_id, waiting_id]
    assert [run.outcomes for run in caught.value.report] == [["released"]]
    message = str(caught.value)
    assert message.startswith("the drain did not end within 1 s; still running or due (2):")
    assert f"{stuck_id}  stuck()  queue=default  running" in message
    assert f"{waiting_id}  waiting()  queue=default  queued" in message
    # The forced stop gave the job back (no attempt counted), due from then: a drain runs
    # it after the job that was waiting.
    assert [run.id for run in drain(app)] == [waiting_id, stuck_id]


def test_a_drain_leaves_the_app_as_it_found_it(app: heartq.App) -> None:
    @app.task
    def fails() -> None:
        raise ValueError("x")

    @app.hooks.attempt
    def mine(attempt: heartq.AttemptInfo) -> None: ...

    fails.enqueue()
    listeners = len(app.events)
    drain(app)
    assert len(app.hooks.attempt) == 1
    assert len(app.events) == listeners


def test_a_drain_does_not_tick_periodic_schedules(app: heartq.App) -> None:
    """A schedule's tick falling due during a drain would make a test flaky: the drain's
    worker runs no scheduler (a worker's first pass comes within a second; every=1 would
    tick within the 3 s this job takes)."""
    done = threading.Event()

    @app.periodic(every=1)
    @app.task
    def tick() -> None: ...

    @app.task
    def long_enough() -> None:
        done.wait(3)

    long_enough.enqueue()
    assert [run.task for run in drain(app)] == ["long_enough"]
    assert enqueued(app, tick) == []


def test_bad_arguments_are_one_clear_line(app: heartq.App) -> None:
    with pytest.raises(TypeError, match=r"queues is a list of names, e\.g\. \['a'\]"):
        drain(app, queues="a")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="concurrency must be between 1 and 2147483647, got 0"):
        drain(app, concurrency=0)
    with pytest.raises(heartq.ConfigError, match="timeout"):
        drain(app, timeout=-1)
    with pytest.raises(ValueError, match="name at least one queue"):
        drain(app, queues=[])


# -- a table of the test's own, in the queue's database -----------------------------------


def _table_in_queue_database(app: heartq.App, name: str) -> str:
    """A table for a task's effects beside the queue: in the test's schema on PostgreSQL
    (dropped with it), in the queue's file on SQLite."""
    table = _qualified(app, name)
    app.migrate()  # the file, or the schema, exists
    with _open(app) as conn:
        conn.execute(f"CREATE TABLE {table} (value INTEGER)")
    return table


def _qualified(app: heartq.App, name: str) -> str:
    if app.url.startswith("postgres"):
        return f'"{app.url.rsplit("schema=", 1)[1]}".{name}'
    return name


class _open:
    """A plain connection on the app's queue database, committed on exit."""

    def __init__(self, app: heartq.App) -> None:
        self.app = app

    def __enter__(self) -> Any:
        if self.app.url.startswith("postgres"):
            import psycopg

            from heartq.store.postgres.connection import parse_url

            self.conn: Any = psycopg.connect(parse_url(self.app.url)[0], autocommit=True)
        else:
            import sqlite3

            self.conn = sqlite3.connect(self.app.url.removeprefix("sqlite:///"))
        return self.conn

    def __exit__(self, *exc: object) -> None:
        self.conn.commit()
        self.conn.close()


def _values(app: heartq.App, table: str) -> list[int]:
    with _open(app) as conn:
        return [row[0] for row in conn.execute(f"SELECT value FROM {table}").fetchall()]


@on_every_backend
def test_a_drain_waits_for_a_job_whose_dependency_runs_elsewhere(app: heartq.App) -> None:
    """A waiting job is pending work while its dependency is (`Store.has_pending`): here
    the dependency runs on a worker of another queue, and the drain of `default` runs the
    dependent once it is released, rather than stopping at `nothing left`."""
    go = threading.Event()

    @app.task(queue="slow")
    def upstream() -> str:
        assert go.wait(30)
        return "up"

    @app.task
    def downstream() -> str:
        return "down"

    first = upstream.enqueue()
    other = heartq.Worker(app, queues=["slow"], poll_interval=0.02, shutdown_timeout=2)
    thread = threading.Thread(target=other.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while app.get_job(first)["status"] != JobStatus.RUNNING:
            assert time.monotonic() < deadline, "the upstream job never started"
            time.sleep(0.01)
        then = downstream.options(depends_on=[first]).enqueue()
        threading.Timer(0.3, go.set).start()  # while the drain runs (when does not matter)
        report = drain(app, queues=["default"], timeout=30)
    finally:
        go.set()
        other.request_stop()
        thread.join(15)
    assert [(run.id, run.result) for run in report] == [(then, "down")]
