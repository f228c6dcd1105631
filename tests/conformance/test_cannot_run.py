"""Attempts that could not run their task's code (`heartq.lifecycle.fate.cannot_run`):
arguments that do not bind and a task no worker declared are dead at once, after one
attempt; a task declared by another worker waits for one that knows it, not counted and
not at once. The same fenced finish on every backend."""

from __future__ import annotations

from heartq.errors import BadArguments
from heartq.lifecycle import fate
from heartq.lifecycle.fate import bad_arguments_end, unknown_task_end
from heartq.model import ClaimedJob, JobStatus, Outcome
from heartq.store import Store

from .support import claim_one, enqueue_one, epoch, outcomes_of, register


def test_arguments_that_do_not_bind_are_dead_after_one_attempt(store: Store, t0: float) -> None:
    job_id = enqueue_one(store, t0, task="crunch", args={"nmae": "x"}, max_retries=3)
    register(store, "w1", t0)
    job = claim_one(store, "w1", t0)
    refused = BadArguments("task 'crunch': missing a required argument: 'name'")
    finish = fate.decide(job, bad_arguments_end(refused), cancel_requested=False)
    assert store.finish([finish], now=t0 + 1) == []
    got = store.get_job(job_id)
    assert (got["status"], got["attempts"], outcomes_of(got)) == ("dead", 1, ["failed"])
    assert got["dead_reason"] == (
        "its arguments do not fit the task, not retried: BadArguments: task 'crunch': "
        "missing a required argument: 'name'"
    )
    assert got["args"] == {"nmae": "x"}  # kept for a replay


def test_a_task_no_worker_declared_is_dead_after_one_attempt(store: Store, t0: float) -> None:
    job_id = enqueue_one(store, t0, task="nobody", max_retries=3)
    register(store, "w1", t0)
    job = claim_one(store, "w1", t0)
    finish = fate.decide(job, unknown_task_end("nobody", declared=False), False)
    store.finish([finish], now=t0 + 1)
    got = store.get_job(job_id)
    assert (got["status"], got["attempts"], outcomes_of(got)) == ("dead", 1, ["failed"])
    assert got["dead_reason"].startswith("unknown task 'nobody': no worker has declared it")
    assert "UnknownTask: task 'nobody' is not registered" in got["error"]


def test_a_task_declared_elsewhere_waits_uncounted_and_longer_each_time(
    store: Store, t0: float
) -> None:
    job_id = enqueue_one(store, t0, task="elsewhere", max_retries=0)
    register(store, "w1", t0)
    now = t0
    waits = []
    for execution in (1, 2, 3):
        job = claim_one(store, "w1", now)
        assert (job.execution_id, job.attempt) == (execution, 1)  # none counted before
        finish = fate.decide(job, unknown_task_end("elsewhere", declared=True), False)
        assert (finish.outcome, finish.status) == (Outcome.RELEASED, JobStatus.QUEUED)
        store.finish([finish], now=now + 1)
        got = store.get_job(job_id)
        assert (got["status"], got["attempts"], got["dead_reason"]) == ("queued", 0, None)
        run_at = epoch(got["run_at"])
        assert run_at is not None
        waits.append(run_at - (now + 1))
        assert store.claim("w1", ["default"], 1, 30.0, now=run_at - 0.01) == []  # no busy loop
        now = run_at + 0.01  # the ISO time keeps milliseconds
    base = fate.WAIT_FOR_TASK
    for number, wait in enumerate(waits):  # 5, 10, 20 s, each +/-25 %
        assert base * 2**number * 0.74 <= wait <= base * 2**number * 1.26, waits
    got = store.get_job(job_id)
    assert outcomes_of(got) == ["released"] * 3
    assert all("UnknownTask" in (e["error"] or "") for e in got["executions"])
    job = claim_one(store, "w1", now)  # a worker that knows the task: its one attempt
    store.finish([fate.succeeded(job, "1")], now=now + 1)
    got = store.get_job(job_id)
    assert (got["status"], got["attempts"], got["result"]) == ("succeeded", 1, 1)


def test_a_job_waiting_for_its_task_keeps_its_cancel(store: Store, t0: float) -> None:
    job_id = enqueue_one(store, t0, task="elsewhere")
    register(store, "w1", t0)
    job = claim_one(store, "w1", t0)
    store.cancel_job(job_id, now=t0 + 0.5)
    store.finish([fate.decide(job, unknown_task_end("elsewhere"), False)], now=t0 + 1)
    assert store.get_job(job_id)["status"] == "cancelled"


def test_the_wait_never_exceeds_its_cap() -> None:
    """A job given back many times (its execution id far ahead of its attempts) waits at
    most `WAIT_FOR_TASK_MAX`, and never less than 3/4 of it then."""
    job = ClaimedJob("j", "elsewhere", "default", {}, 1, 40, 3, 5.0, 3600.0, None, 0.0)
    for _ in range(50):
        finish = fate.decide(job, unknown_task_end("elsewhere", declared=True), False)
        assert fate.WAIT_FOR_TASK_MAX * 0.75 <= finish.retry_delay <= fate.WAIT_FOR_TASK_MAX
