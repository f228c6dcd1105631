"""What happens to a job after each kind of attempt end, through a real worker."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import heartq
from tests.support import wait_for


def status_of(app: heartq.App, job_id: str) -> str:
    return str(app.get_job(job_id)["status"])


def wait_status(app: heartq.App, job_id: str, status: str, timeout: float = 10.0) -> None:
    """Wait for the job to reach `status`; on timeout, say where it is and how it got there."""
    try:
        wait_for(lambda: status_of(app, job_id) == status, timeout, what=f"status {status}")
    except AssertionError as exc:
        job = app.get_job(job_id)
        history = [(e["execution_id"], e["outcome"], e["error"]) for e in job["executions"]]
        raise AssertionError(f"{exc}; job is {job['status']}, executions {history}") from None


POOLS = ["thread", "async"]


@pytest.mark.parametrize("pool", POOLS)
def test_success_stores_result_progress_and_context(app: heartq.App, run_worker, pool) -> None:
    seen = {}

    @app.task
    def work(ctx: heartq.JobContext, n: int) -> dict:
        ctx.heartbeat(progress=0.5, stage="half", message="halfway")
        seen.update(attempt=ctx.attempt, execution_id=ctx.execution_id, worker=ctx.worker_id)
        return {"double": n * 2}

    job_id = work.enqueue(n=21)
    with run_worker(app, pool=pool) as worker:
        wait_status(app, job_id, "succeeded")
    job = app.get_job(job_id)
    assert job["result"] == {"double": 42}
    assert job["attempts"] == 1 and job["execution_id"] == 1
    assert seen == {"attempt": 1, "execution_id": 1, "worker": worker.id}
    assert [e["outcome"] for e in job["executions"]] == ["succeeded"]
    assert job["executions"][0]["worker_id"] == worker.id


def test_progress_reaches_the_database_with_the_next_heartbeat(app, run_worker) -> None:
    release = threading.Event()

    @app.task
    def slow(ctx: heartq.JobContext) -> None:
        ctx.heartbeat(progress=0.25, stage="download", message="fetching")
        release.wait(10)

    job_id = slow.enqueue()
    with run_worker(app):
        progress = wait_for(
            lambda: app.get_job(job_id)["progress"]["value"] == 0.25 and app.get_job(job_id),
            what="progress stored",
        )["progress"]
        release.set()
        wait_status(app, job_id, "succeeded")
    assert progress == {"value": 0.25, "stage": "download", "message": "fetching"}
    assert app.get_job(job_id)["progress"]["value"] == 1.0  # a finished job reads as complete


@pytest.mark.parametrize("pool", POOLS)
def test_exceptions_retry_with_backoff_then_dead(app, run_worker, pool) -> None:
    attempts: list[int] = []

    @app.task(max_retries=2, retry_backoff=0.05)
    async def flaky_async() -> None:
        attempts.append(1)
        await asyncio.sleep(0)
        raise RuntimeError("boom")

    @app.task(max_retries=2, retry_backoff=0.05)
    def flaky() -> None:
        attempts.append(1)
        raise RuntimeError("boom")

    job_id = (flaky_async if pool == "async" else flaky).enqueue()
    with run_worker(app, pool=pool):
        wait_status(app, job_id, "dead")
    job = app.get_job(job_id)
    assert len(attempts) == 3 == job["attempts"]
    assert [e["outcome"] for e in job["executions"]] == ["failed"] * 3
    assert "RuntimeError: boom" in job["error"]
    assert job["dead_reason"] == "failed 3 attempts; last error: RuntimeError: boom"
    starts = [e["started_at"] for e in job["executions"]]
    assert starts == sorted(starts)


def test_permanent_skips_retries(app, run_worker) -> None:
    class BadInput(heartq.Permanent):
        pass

    @app.task(max_retries=5)
    def strict() -> None:
        raise BadInput("the file is not a PNG")

    job_id = strict.enqueue()
    with run_worker(app):
        wait_status(app, job_id, "dead")
    job = app.get_job(job_id)
    assert job["attempts"] == 1
    assert job["dead_reason"].startswith("permanent failure:")
    assert job["dead_reason"].endswith("BadInput: the file is not a PNG")


def test_unknown_task_ends_in_the_dead_letter_queue_not_lost(app, run_worker) -> None:
    job_id = app.enqueue("nobody_knows_me", {"x": 1}, max_retries=1)
    with run_worker(app, queues=["default"]):
        wait_status(app, job_id, "dead")
    job = app.get_job(job_id)
    assert "not registered" in job["error"]
    assert job["args"] == {"x": 1}


def test_result_that_is_not_json_fails_permanently(app, run_worker) -> None:
    @app.task(max_retries=3)
    def returns_object() -> object:
        return object()

    job_id = returns_object.enqueue()
    with run_worker(app):
        wait_status(app, job_id, "dead")
    job = app.get_job(job_id)
    assert job["attempts"] == 1
    assert "result must be JSON-serializable" in job["error"]


def test_a_progress_stage_or_message_with_nul_is_refused_as_every_text_given(
    app, run_worker
) -> None:
    """NUL in text a user gives heartq is refused, whatever the text: a stage or message
    too (it was escaped to a visible `\\x00` there, refused everywhere else). The task
    is told in one line and may carry on; nothing of the bad report is recorded."""
    said: list[str] = []

    @app.task
    def reports(ctx: heartq.JobContext) -> str:
        ctx.heartbeat(progress=0.25, stage="start", message="fine")
        for report in ({"stage": "a\x00b"}, {"message": "x\x00"}, {"message": 7}):
            try:
                ctx.heartbeat(progress=0.5, **report)
            except (heartq.ConfigError, TypeError) as exc:
                said.append(f"{type(exc).__name__}: {exc}")
        return "done"

    job_id = reports.enqueue()
    with run_worker(app):
        wait_status(app, job_id, "succeeded")
    assert said == [
        "ConfigError: stage must not contain NUL characters",
        "ConfigError: message must not contain NUL characters",
        "TypeError: message must be text (a str), got 7",
    ]
    progress = app.get_job(job_id)["progress"]
    assert (progress["stage"], progress["message"]) == ("start", "fine")


def test_a_result_or_checkpoint_no_backend_takes_is_refused_the_same_everywhere(
    app, run_worker
) -> None:
    """NUL, or nesting past 100 levels: a result fails the job at once (the same code
    would return it again); a checkpoint raises `PayloadError` in the task, which may
    carry on. Alike on SQLite and PostgreSQL (whose text type cannot hold NUL)."""
    deep: list[object] = []
    for _ in range(200):
        deep = [deep]
    said: dict[str, list[str]] = {"nul": [], "deep": []}  # by job: the two run at once

    @app.task(max_retries=3)
    def returns(ctx: heartq.JobContext, kind: str) -> object:
        for bad in ({"c": "a\x00"}, deep):
            try:
                ctx.heartbeat(checkpoint=bad)
            except heartq.PayloadError as exc:
                said[kind].append(str(exc))
        return {"r": "a\x00"} if kind == "nul" else deep

    ids = {kind: returns.enqueue(kind=kind) for kind in ("nul", "deep")}
    with run_worker(app):
        for job_id in ids.values():
            wait_status(app, job_id, "dead")
    for kind, says in (("nul", "result with a NUL character"), ("deep", "nested too deeply")):
        job = app.get_job(ids[kind])
        assert job["attempts"] == 1 and says in job["error"], job["error"]
        assert job["checkpoint"] is None
    for kind in ("nul", "deep"):
        assert len(said[kind]) == 2 and "checkpoint with a NUL character" in said[kind][0], said
        assert said[kind][1].startswith("checkpoint nested too deeply"), said


def test_hard_timeout_closes_the_attempt_as_timed_out(app, run_worker) -> None:
    stop = threading.Event()

    @app.task(timeout=0.2, max_retries=0)
    def hangs() -> None:
        stop.wait(30)

    job_id = hangs.enqueue()
    with run_worker(app):
        wait_status(app, job_id, "dead")
    stop.set()
    job = app.get_job(job_id)
    assert [e["outcome"] for e in job["executions"]] == ["timed_out"]
    assert job["dead_reason"].startswith("timed out")


def test_async_timeout_cancels_the_coroutine(app, run_worker) -> None:
    cancelled = threading.Event()

    @app.task(timeout=0.2, max_retries=0)
    async def sleeps() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    job_id = sleeps.enqueue()
    with run_worker(app, pool="async"):
        wait_status(app, job_id, "dead")
        wait_for(cancelled.is_set, what="coroutine cancelled")
    assert app.get_job(job_id)["executions"][0]["outcome"] == "timed_out"


def test_cancel_a_queued_job_never_runs_it(app, run_worker) -> None:
    ran = threading.Event()

    @app.task
    def never() -> None:
        ran.set()

    job_id = never.enqueue_with({}, delay=0.3)
    assert app.cancel(job_id) == "cancelled"
    with run_worker(app):
        time_after_due = time.monotonic() + 0.5
        wait_for(lambda: time.monotonic() > time_after_due)
    assert not ran.is_set()
    assert status_of(app, job_id) == "cancelled"


@pytest.mark.parametrize("pool", POOLS)
def test_a_task_that_returns_once_cancelled_ends_cancelled_not_succeeded(
    app: heartq.App, run_worker, pool: str
) -> None:
    """A task that stops early on `ctx.cancelled` by returning (not raising) returns what
    the cancel cut short: the worker told it to stop before its end was recorded, so the
    attempt ends `cancelled` and nothing it returned is kept. (The chaos run saw a
    `chaos_timeout` job, whose task only returns once cancelled, end `succeeded`.)"""
    started = threading.Event()
    returned = threading.Event()

    @app.task(max_retries=3)
    def stops_when_told(ctx: heartq.JobContext) -> str:
        started.set()
        deadline = time.monotonic() + 30
        while not ctx.cancelled and time.monotonic() < deadline:
            time.sleep(0.005)
        returned.set()
        return "cut short"

    @app.task(max_retries=3)
    async def stops_when_told_async(ctx: heartq.JobContext) -> str:
        started.set()
        deadline = time.monotonic() + 30
        while not ctx.cancelled and time.monotonic() < deadline:
            await asyncio.sleep(0)  # never suspended long: sees the flag before any cancel
            time.sleep(0.005)
        returned.set()
        return "cut short"

    task = stops_when_told_async if pool == "async" else stops_when_told
    job_id = task.enqueue()
    with run_worker(app, pool=pool):
        assert started.wait(10), "the task did not start"
        assert app.cancel(job_id) == "cancel_requested"
        wait_for(lambda: app.get_job(job_id)["status"] != "running", 10, what="the job's end")
        job = app.get_job(job_id)
        outcomes = [e["outcome"] for e in job["executions"]]
        assert (job["status"], outcomes, job["result"]) == ("cancelled", ["cancelled"], None)
        assert job["attempts"] == 1
    assert returned.is_set()  # it did return its value; the worker did not keep it


def test_replay_from_the_dead_letter_queue_keeps_the_history(app, run_worker) -> None:
    fixed = threading.Event()

    @app.task(max_retries=0)
    def buggy() -> str:
        if not fixed.is_set():
            raise ValueError("bug")
        return "ok"

    job_id = buggy.enqueue()
    with run_worker(app):
        wait_status(app, job_id, "dead")
        fixed.set()
        assert app.store.replay_dead([job_id]) == [job_id]
        wait_status(app, job_id, "succeeded")
    job = app.get_job(job_id)
    assert [e["outcome"] for e in job["executions"]] == ["failed", "succeeded"]
    assert [e["execution_id"] for e in job["executions"]] == [1, 2]
    assert job["dead_reason"] is None and job["result"] == "ok"


def test_checkpoint_is_handed_to_the_next_attempt(app, run_worker) -> None:
    seen: list[object] = []

    @app.task(max_retries=1, retry_backoff=0.01)
    def resumable(ctx: heartq.JobContext) -> object:
        seen.append(ctx.checkpoint)
        if ctx.attempt == 1:
            ctx.heartbeat(checkpoint={"done": 7})
            raise RuntimeError("interrupted")
        return ctx.checkpoint

    job_id = resumable.enqueue()
    with run_worker(app):
        wait_status(app, job_id, "succeeded")
    assert seen == [None, {"done": 7}]
    assert app.get_job(job_id)["result"] == {"done": 7}


def test_job_cancelled_says_in_one_line_who_cancelled_and_how_it_ended(
    app: heartq.App, run_worker
) -> None:
    """`app.result()` of a cancelled job raises `JobCancelled` whose message is one line:
    who asked (the job's `cancelled_by`) and how the job ended, never the traceback of
    heartq's own frames that stopped the task (kept whole in `.error`)."""
    started = threading.Event()
    release = threading.Event()

    @app.task(max_retries=0)
    def polite(ctx: heartq.JobContext) -> None:
        started.set()
        while True:
            ctx.heartbeat()  # raises heartq.Cancelled once told
            time.sleep(0.01)

    @app.task(max_retries=0)
    def deaf() -> None:
        started.set()
        release.wait(30)  # never looks: ended after the cancel grace

    queued = polite.options(delay=3600).enqueue()
    app.cancel(queued, by="ops-bot")
    ended = {"queued": (queued, "ops-bot: cancelled before it ran")}
    with run_worker(app):
        for name, task in (("polite", polite), ("deaf", deaf)):
            started.clear()
            job_id = task.enqueue()
            assert started.wait(10), f"{name} did not start"
            assert app.cancel(job_id, by=f"cancel of {name}") == "cancel_requested"
            how = (
                "its task stopped at the request"
                if name == "polite"
                else "cancelled (forced): the task did not stop within the cancel grace, so "
                "its worker ended the attempt"
            )
            ended[name] = (job_id, f"cancel of {name}: {how}")
            wait_status(app, job_id, "cancelled")
        release.set()
    for name, (job_id, said) in ended.items():
        with pytest.raises(heartq.JobCancelled) as raised:
            app.result(job_id, timeout=5)
        assert str(raised.value) == f"job {job_id} was cancelled by {said}", name
        assert raised.value.cancelled_by == said.partition(":")[0]
        if name == "polite":  # the whole story stays in `.error`
            assert "heartq.errors.Cancelled" in (raised.value.error or "")
