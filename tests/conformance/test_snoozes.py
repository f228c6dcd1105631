"""A snooze as each backend lands it (`FINISH` of an attempt the worker decided `snoozed`):
the job is queued again, runnable after the delay, its attempt not counted and its
snoozes counted (the next claim hands the count to the worker, which judges the task's
bound); the execution keeps what the task said, the job's last error does not; a
replay starts the count over; a drain's retries-due-now and a burst's wait see a
snoozed job as they see a retry."""

from __future__ import annotations

from heartq.lifecycle import fate
from heartq.model import ClaimedJob, Outcome
from heartq.store import Store

from .support import new_job, register

LEASE = 600.0
DELAY = 30.0


def _claim(store: Store, job_id: str, now: float) -> ClaimedJob:
    (job,) = store.claim_ids("w1", [job_id], LEASE, now=now)
    return job


def _snooze(store: Store, job: ClaimedJob, now: float, reason: str = "not yet") -> None:
    finish = fate.snoozed(job, DELAY, f"snoozed for {DELAY:g} s: {reason}")
    assert store.finish([finish], now=now) == []


def test_a_snooze_queues_the_job_after_its_delay_not_counted(store: Store, t0: float) -> None:
    register(store, "w1", t0)
    (job_id,) = store.enqueue([new_job(max_retries=0)], now=t0)
    first = _claim(store, job_id, t0 + 1)
    assert (first.attempt, first.snoozes) == (1, 0)
    _snooze(store, first, t0 + 2)

    stored = store.get_job(job_id)
    assert (stored["status"], stored["attempts"], stored["snoozes"]) == ("queued", 0, 1)
    assert stored["error"] is None  # what the task said is its execution's, not an error
    assert stored["worker_id"] is None and stored["finished_at"] is None
    (execution,) = stored["executions"]
    assert (execution["outcome"], execution["error"]) == ("snoozed", "snoozed for 30 s: not yet")
    assert store.claim("w1", ["default"], 1, LEASE, now=t0 + 2 + DELAY - 1) == []  # not before
    second = store.claim("w1", ["default"], 1, LEASE, now=t0 + 2 + DELAY)[0]
    assert (second.id, second.attempt, second.execution_id, second.snoozes) == (job_id, 1, 2, 1)


def test_a_snooze_keeps_the_last_error_of_the_job(store: Store, t0: float) -> None:
    register(store, "w1", t0)
    (job_id,) = store.enqueue([new_job(max_retries=3, retry_backoff=0.0)], now=t0)
    failed = fate.failed(_claim(store, job_id, t0 + 1), Outcome.FAILED, "ValueError: x")
    assert store.finish([failed], now=t0 + 2) == []
    _snooze(store, _claim(store, job_id, t0 + 3), t0 + 4)
    stored = store.get_job(job_id)
    assert (stored["attempts"], stored["snoozes"], stored["error"]) == (1, 1, "ValueError: x")
    assert [e["outcome"] for e in stored["executions"]] == ["failed", "snoozed"]


def test_a_replay_starts_the_snoozes_over(store: Store, t0: float) -> None:
    register(store, "w1", t0)
    (job_id,) = store.enqueue([new_job(max_retries=0)], now=t0)
    _snooze(store, _claim(store, job_id, t0 + 1), t0 + 2)
    job = _claim(store, job_id, t0 + 3 + DELAY)
    dead = fate.failed(job, Outcome.FAILED, "ValueError: x")
    assert store.finish([dead], now=t0 + 4 + DELAY) == []
    assert store.get_job(job_id)["snoozes"] == 1
    assert store.replay_dead([job_id], now=t0 + 5 + DELAY) == [job_id]
    stored = store.get_job(job_id)
    assert (stored["status"], stored["attempts"], stored["snoozes"]) == ("queued", 0, 0)
    assert [e["outcome"] for e in stored["executions"]] == ["snoozed", "failed"]  # history kept


def test_a_snoozed_job_is_waited_for_and_made_due_as_a_retry(store: Store, t0: float) -> None:
    register(store, "w1", t0)
    (job_id,) = store.enqueue([new_job(max_retries=0)], now=t0)
    _snooze(store, _claim(store, job_id, t0 + 1), t0 + 2)
    assert store.has_pending(["default"], now=t0 + 3)  # a burst waits for it
    assert not store.has_pending(["default"], now=t0 + 3, retries=False)  # a drain does not
    assert store.retry_now(["default"], now=t0 + 3) == [job_id]
    assert store.claim("w1", ["default"], 1, LEASE, now=t0 + 3)[0].snoozes == 1
