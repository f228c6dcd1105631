"""Hooks around every enqueue, attempt, and a worker's start and stop (`heartq.hooks`),
through a real worker on both backends and every pool: what each hook sees, in which
order, what it may change (an enqueued job's meta), and that a failing hook costs no job
and no result."""

from __future__ import annotations

import contextvars
import json
import logging
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import heartq
from heartq.maintenance.scheduler import Scheduler
from heartq.model import TickPlan
from tests.support import wait_for

from .test_outcomes import wait_status

POOLS = ["thread", "async"]


def test_enqueue_hooks_add_meta_that_the_attempt_reads(app: heartq.App, run_worker) -> None:
    seen: list[dict[str, Any]] = []
    after: list[tuple[str | None, str]] = []

    @app.hooks.enqueue
    def tenant(job: heartq.EnqueueInfo) -> Iterator[None]:
        job.meta["tenant"] = "acme"
        job.meta["queue_seen"] = job.queue
        yield
        after.append((job.job_id, job.task))

    @app.task(queue="inbox")
    def work(ctx: heartq.JobContext, n: int) -> int:
        seen.append(dict(ctx.meta))
        return n

    one = work.enqueue(n=1)
    by_name = app.enqueue("work", {"n": 2}, meta={"request": "r-7"})
    many = app.enqueue_many("work", [{"n": 3}, {"n": 4}])
    assert after == [(one, "work"), (by_name, "work"), (many[0], "work"), (many[1], "work")]
    stored = app.get_job(by_name)["meta"]
    assert stored == {"request": "r-7", "tenant": "acme", "queue_seen": "inbox"}
    with run_worker(app, queues=["inbox"]):
        for job_id in (one, by_name, *many):
            wait_status(app, job_id, "succeeded")
    assert sorted(m.get("request", "") for m in seen) == ["", "", "", "r-7"]
    assert all(m["tenant"] == "acme" for m in seen)


def test_a_job_without_meta_stores_none_and_reads_empty(app: heartq.App, run_worker) -> None:
    @app.task
    def plain(ctx: heartq.JobContext) -> dict[str, Any]:
        return dict(ctx.meta)

    job_id = plain.enqueue()
    assert app.get_job(job_id)["meta"] == {}
    with run_worker(app):
        wait_status(app, job_id, "succeeded")
    assert app.get_job(job_id)["result"] == {}


@pytest.mark.parametrize("pool", POOLS)
def test_attempt_hooks_see_each_attempt_and_its_outcome(app: heartq.App, run_worker, pool) -> None:
    calls: list[tuple[Any, ...]] = []

    @app.hooks.attempt
    def outer(attempt: heartq.AttemptInfo) -> Iterator[None]:
        calls.append(("outer before", attempt.attempt))
        yield
        calls.append(
            (
                "outer after",
                attempt.attempt,
                attempt.outcome,
                type(attempt.exception).__name__ if attempt.exception else None,
                attempt.will_retry,
            )
        )

    @app.hooks.attempt
    def inner(attempt: heartq.AttemptInfo) -> Iterator[None]:
        calls.append(("inner before", attempt.attempt, attempt.job_id, attempt.meta["m"]))
        yield
        calls.append(("inner after", attempt.attempt))

    @app.task(max_retries=1, retry_backoff=0)
    def flaky(ctx: heartq.JobContext) -> str:
        if ctx.attempt == 1:
            raise ValueError("first time")
        return "ok"

    job_id = flaky.options(meta={"m": "x"}).enqueue()
    with run_worker(app, pool=pool):
        wait_status(app, job_id, "succeeded")
    assert calls == [
        ("outer before", 1),
        ("inner before", 1, job_id, "x"),
        ("inner after", 1),
        ("outer after", 1, heartq.Outcome.FAILED, "ValueError", True),
        ("outer before", 2),
        ("inner before", 2, job_id, "x"),
        ("inner after", 2),
        ("outer after", 2, heartq.Outcome.SUCCEEDED, None, False),
    ]


@pytest.mark.parametrize("pool", POOLS)
def test_the_last_failure_says_it_will_not_retry(app: heartq.App, run_worker, pool) -> None:
    ends: list[tuple[int, Any, bool]] = []

    @app.hooks.attempt
    def record(attempt: heartq.AttemptInfo) -> Iterator[None]:
        yield
        ends.append((attempt.attempt, attempt.outcome, attempt.will_retry))

    @app.task(max_retries=1, retry_backoff=0)
    async def always_fails() -> None:
        raise RuntimeError("no")

    @app.task(max_retries=5)
    def gives_up() -> None:
        raise heartq.Permanent("never works")

    failing = always_fails.enqueue()
    permanent = gives_up.enqueue()
    with run_worker(app, pool=pool):
        wait_status(app, failing, "dead")
        wait_status(app, permanent, "dead")
    assert sorted(ends, key=str) == sorted(
        [(1, heartq.Outcome.FAILED, True), (2, heartq.Outcome.FAILED, False),
         (1, heartq.Outcome.FAILED, False)],
        key=str,
    )  # fmt: skip


@pytest.mark.parametrize("pool", POOLS)
def test_a_context_set_by_a_hook_is_the_tasks_context(app: heartq.App, run_worker, pool) -> None:
    """What a tracing hook relies on: a context variable it sets before is seen by the
    task's code, sync or async, and is reset after."""
    current: contextvars.ContextVar[str] = contextvars.ContextVar("current", default="none")

    @app.hooks.attempt
    def set_it(attempt: heartq.AttemptInfo) -> Iterator[None]:
        token = current.set(f"span-{attempt.job_id}")
        yield
        current.reset(token)

    @app.task
    def sync_reads() -> str:
        return current.get()

    @app.task
    async def async_reads() -> str:
        return current.get()

    jobs = [sync_reads.enqueue(), async_reads.enqueue()]
    with run_worker(app, pool=pool):
        for job_id in jobs:
            wait_status(app, job_id, "succeeded")
    assert [app.get_job(j)["result"] for j in jobs] == [f"span-{j}" for j in jobs]


def test_a_failing_hook_is_logged_and_costs_nothing(
    app: heartq.App, run_worker, caplog: pytest.LogCaptureFixture
) -> None:
    @app.hooks.enqueue
    def breaks_before(job: heartq.EnqueueInfo) -> None:
        raise RuntimeError("enqueue hook broke")

    @app.hooks.enqueue
    def leaves_bad_meta(job: heartq.EnqueueInfo) -> None:
        job.meta["when"] = object()  # not JSON: the job keeps the meta it had

    @app.hooks.attempt
    def breaks_after(attempt: heartq.AttemptInfo) -> Iterator[None]:
        yield
        raise RuntimeError("attempt hook broke")

    @app.hooks.attempt
    def yields_twice(attempt: heartq.AttemptInfo) -> Iterator[None]:
        yield
        yield

    @app.hooks.attempt
    def never_yields(attempt: heartq.AttemptInfo) -> Iterator[None]:
        if attempt.attempt:
            return
        yield

    @app.hooks.worker_start
    def start_breaks(worker: heartq.WorkerHookInfo) -> None:
        raise RuntimeError("start hook broke")

    @app.task
    def work(ctx: heartq.JobContext) -> dict[str, Any]:
        return dict(ctx.meta)

    with caplog.at_level(logging.ERROR, logger="heartq"):
        job_id = work.options(meta={"kept": True}).enqueue()
        with run_worker(app):
            wait_status(app, job_id, "succeeded")
    job = app.get_job(job_id)
    assert job["result"] == {"kept": True}
    assert [e["outcome"] for e in job["executions"]] == ["succeeded"]
    failures = [
        (f["kind"], f["hook"].rpartition(".")[2], f["stage"])
        for f in (getattr(r, "heartq_fields", {}) for r in caplog.records)
        if f and "hook" in f
    ]
    assert sorted(failures) == sorted(
        [
            ("enqueue", "breaks_before", "before"),
            ("enqueue", "_with_meta", "before"),
            ("attempt", "breaks_after", "after"),
            ("attempt", "yields_twice", "after"),
            ("attempt", "never_yields", "before"),
            ("worker_start", "start_breaks", "before"),
        ]
    )  # fmt: skip


def test_worker_hooks_run_once_at_start_and_stop(app: heartq.App, run_worker) -> None:
    seen: list[tuple[str, str, tuple[str, ...]]] = []
    app.hooks.worker_start(lambda w: seen.append(("start", w.worker_id, tuple(w.queues))))
    app.hooks.worker_stop(lambda w: seen.append(("stop", w.worker_id, tuple(w.queues))))
    with run_worker(app, queues=["a", "b"]) as worker:
        assert seen == [("start", worker.id, ("a", "b"))]
    assert seen == [("start", worker.id, ("a", "b")), ("stop", worker.id, ("a", "b"))]


def test_periodic_ticks_run_the_enqueue_hooks(app: heartq.App, run_worker) -> None:
    """A tick is enqueued by a worker's scheduler, through the same hooks as any enqueue:
    before (its meta is stored), after (with the tick job's id); the attempt reads the
    meta."""
    told: list[tuple[str, dict[str, Any], str, str | None]] = []
    seen: list[dict[str, Any]] = []

    @app.hooks.enqueue
    def tag(job: heartq.EnqueueInfo) -> Iterator[None]:
        job.meta["origin"] = "hook"
        yield
        told.append((job.task, dict(job.args), job.queue, job.job_id))

    @app.periodic(every=1, args={"n": 3})
    @app.task(queue="ticks")
    def tick(ctx: heartq.JobContext, n: int) -> int:
        seen.append(dict(ctx.meta))
        return n

    with run_worker(app, queues=["ticks"]):
        wait_for(lambda: seen, 15, what="a tick to run")
    (first, *_) = told
    assert first[:3] == ("tick", {"n": 3}, "ticks")
    job = app.get_job(str(first[3]))
    assert job["task"] == "tick" and job["meta"] == {"origin": "hook"}
    assert seen[0] == {"origin": "hook"}


def _in_thread(call: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """`call()` on a thread of its own, failing the test (rather than hanging it) if it
    has not returned within `timeout` seconds."""
    answer: list[Any] = []
    thread = threading.Thread(target=lambda: answer.append(call()), daemon=True)
    thread.start()
    thread.join(timeout)
    assert answer, f"{what} did not return within {timeout:g} s"
    return answer[0]


def _due_schedule(app: heartq.App, catch_up: str = "latest") -> Scheduler:
    """A scheduler of one schedule (every second) that has seen it once, returned once
    the schedule's next tick has come."""

    @app.periodic(every=1, catch_up=catch_up)
    @app.task(queue="ticks")
    def beat(ctx: heartq.JobContext) -> None:
        pass

    schedules = list(app.schedules.values())
    scheduler = Scheduler(schedules, app.make_tick_jobs, app.store, "w-first")
    assert scheduler.run_once() == 0  # first sight: starts with the next tick
    (row,) = app.store.list_schedules()
    wait_for(lambda: app.store.clock() >= float(row["next_tick"]), 5, what="the next tick")
    return scheduler


def test_a_tick_hook_runs_outside_the_ticks_transaction(app: heartq.App) -> None:
    """A tick's enqueue hooks hold no lock while they run: another worker's scheduler may
    tick the same schedule meanwhile (inside the transaction, it waited for the schedule's
    row, or SQLite's write lock, that the hook's own worker held: a deadlock). The tick is
    one job; the hooks of the scheduler that stored it are told its id, the others' None."""
    first = _due_schedule(app)
    second = Scheduler(first.schedules, app.make_tick_jobs, app.store, "w-second")
    told: list[tuple[str, str | None]] = []
    nested: list[str] = []

    @app.hooks.enqueue
    def meanwhile(job: heartq.EnqueueInfo) -> Iterator[None]:
        if not nested:  # the first scheduler's hook: the second ticks right now
            nested.append("second")
            told.append(("second ticked", None if second.run_once() == 0 else "a job"))
        yield
        told.append(("after", job.job_id))

    assert _in_thread(first.run_once, "the first scheduler's pass") == 0
    (job,) = app.store.list_jobs()
    assert job["task"] == "beat" and job["schedule"] == "beat"
    assert told == [("after", job["id"]), ("second ticked", "a job"), ("after", None)]


def test_a_tick_the_hooks_did_not_see_is_left_for_the_next_pass(app: heartq.App) -> None:
    """The schedule's row moved back while the hooks ran (by hand: here, a tick pass whose
    plan rewinds it 3 s): the transaction would find ticks the hooks never saw, so it
    stores nothing; the next pass stores each of them, through the hooks."""
    scheduler = _due_schedule(app, catch_up="all")
    told: list[str | None] = []
    rewound: list[bool] = []

    def rewind(last: float | None, now: float) -> TickPlan:
        assert last is not None
        return TickPlan([], last - 3, now)

    @app.hooks.enqueue
    def moving(job: heartq.EnqueueInfo) -> Iterator[None]:
        if not rewound:
            rewound.append(True)
            app.store.tick_schedule("beat", "beat", "every 1s", rewind, lambda t: [], by="op")
        yield
        told.append(job.job_id)

    (before,) = app.store.list_schedules()
    assert _in_thread(scheduler.run_once, "the scheduler's pass") == 0
    (row,) = app.store.list_schedules()
    assert float(row["last_tick"]) == float(before["last_tick"]) - 3  # untouched since
    assert app.store.list_jobs() == [] and told and set(told) == {None}
    told.clear()
    stored = scheduler.run_once()
    jobs = app.store.list_jobs(limit=100)
    assert stored == len(jobs) >= 3
    assert sorted(told) == sorted(j["id"] for j in jobs)
    (row,) = app.store.list_schedules()
    assert float(row["last_tick"]) > float(before["last_tick"]) - 3


def test_an_enqueue_that_fails_tells_its_hooks(app: heartq.App) -> None:
    told: list[str] = []

    @app.hooks.enqueue
    def watch(job: heartq.EnqueueInfo) -> Iterator[None]:
        yield
        told.append(type(job.exception).__name__ if job.exception else "none")

    app.migrate()
    with pytest.raises(heartq.ConfigError) as refused:
        app.enqueue("t", {"x": 1}, connection=object())  # the store refuses it
    assert told == [type(refused.value).__name__]
    assert app.store.list_jobs() == []


HOOKED_MODULE = """
import json, os
import heartq

app = heartq.App()
RECORD = {record!r}

def note(*line):
    with open(RECORD, "a") as f:
        f.write(json.dumps(line) + "\\n")

@app.hooks.attempt
def around(attempt):
    note("before", attempt.attempt, os.getpid(), attempt.meta.get("m"))
    yield
    note("after", attempt.attempt, attempt.outcome, type(attempt.exception).__name__,
         attempt.will_retry, os.getpid())

@app.task(max_retries=1, retry_backoff=0)
def flaky(ctx):
    if ctx.attempt == 1:
        raise KeyError("first")
    return os.getpid()
"""


def test_process_pool_children_run_the_attempt_hooks(
    app: heartq.App, run_worker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child process imports the app's module, and so registers its hooks: they run in
    the child, around the code, as on the other pools."""
    record = tmp_path / "hooks.jsonl"
    module = f"hooked_tasks_{abs(hash(str(tmp_path)))}"
    source = textwrap.dedent(HOOKED_MODULE.format(record=str(record)))
    (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    hooked = __import__(module).app
    hooked.use_url(app.url)
    hooked.settings = app.settings
    job_id = hooked.enqueue("flaky", meta={"m": "from-parent"})
    with run_worker(hooked, pool="process", app_ref=f"{module}:app"):
        wait_for(lambda: hooked.get_job(job_id)["status"] == "succeeded", 30, what="succeeded")
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    child_pid = hooked.get_job(job_id)["result"]
    assert [line[:2] for line in lines] == [
        ["before", 1], ["after", 1], ["before", 2], ["after", 2]
    ]  # fmt: skip
    assert lines[0][3] == "from-parent"
    assert lines[1][2:5] == ["failed", "KeyError", True]
    assert lines[3][2:5] == ["succeeded", "NoneType", False]
    assert lines[3][5] == lines[2][2] == child_pid
    hooked.close()


def test_a_removed_hook_runs_no_more(app: heartq.App) -> None:
    """`remove` unregisters one hook (heartq.testing's drain records attempts this way):
    the others run on, in their order."""
    seen: list[str] = []

    def first(job: heartq.EnqueueInfo) -> None:
        seen.append("first")

    def second(job: heartq.EnqueueInfo) -> None:
        seen.append("second")

    app.hooks.enqueue(first)
    app.hooks.enqueue(second)
    app.enqueue("anything")
    app.hooks.enqueue.remove(first)
    app.enqueue("anything")
    assert seen == ["first", "second", "second"]
    with pytest.raises(ValueError):
        app.hooks.enqueue.remove(first)
    assert len(app.hooks.enqueue) == 1
