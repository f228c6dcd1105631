"""A job's fate is written once: every way an attempt can end, under each retry policy,
with a cancel requested or not (told to the worker, or only on the job's row), goes
through `lifecycle.fate.decide` and `lifecycle.landed` on one side and each dialect's
FINISH and RELEASE statements on the other, and the job must end where the model says.
The statements restate two of the model's rules in SQL (a retry after a cancel request
ends the job cancelled; interrupted and released attempts are not counted), so that they
hold inside the fenced write: this is what keeps the two from drifting apart."""

from __future__ import annotations

import itertools

from heartq.lifecycle import landed
from heartq.lifecycle.ends import AttemptEnd, CannotRun
from heartq.lifecycle.fate import decide
from heartq.model import ClaimedJob, Outcome
from heartq.store import Store

from .support import new_job, register

ENDS = {
    "succeeded": AttemptEnd(Outcome.SUCCEEDED, result_json="1"),
    "failed": AttemptEnd(Outcome.FAILED, error="RuntimeError: boom"),
    "permanent": AttemptEnd(Outcome.FAILED, error="Permanent: no", permanent=True),
    "timed_out": AttemptEnd(Outcome.TIMED_OUT, error="timed out after 1 s"),
    "cancelled": AttemptEnd(Outcome.CANCELLED, error="cancelled"),
    "bad_arguments": AttemptEnd(Outcome.FAILED, error="x", cannot_run=CannotRun.ARGUMENTS),
    "not_declared": AttemptEnd(Outcome.FAILED, error="x", cannot_run=CannotRun.TASK_NOT_DECLARED),
    "task_elsewhere": AttemptEnd(Outcome.FAILED, error="x", cannot_run=CannotRun.TASK_ELSEWHERE),
}
"""Every way the worker can end an attempt it decides (`fate.decide`)."""

CASES = list(itertools.product(ENDS, (0, 2), (False, True), (False, True)))
"""(end, max_retries, cancel told to the worker, cancel on the job's row): a first attempt
with no retry left, or with two."""


def claim_all(store: Store, worker_id: str, count: int, now: float) -> list[ClaimedJob]:
    claimed: list[ClaimedJob] = []
    while len(claimed) < count:
        got = store.claim(worker_id, ["default"], count - len(claimed), 60.0, now=now)
        assert got, f"claimed {len(claimed)} of {count}"
        claimed += got
    return claimed


def test_every_finish_lands_as_the_model_says(store: Store, t0: float) -> None:
    register(store, "w1", t0)
    ids = store.enqueue(
        [new_job(max_retries=retries, retry_backoff=0.0) for _, retries, _, _ in CASES], now=t0
    )
    case_of = dict(zip(ids, CASES, strict=True))
    claimed = claim_all(store, "w1", len(ids), t0 + 1)
    for job in claimed:
        if case_of[job.id][3]:
            assert store.cancel_job(job.id, now=t0 + 2) == "cancel_requested"
    finishes = {
        job.id: decide(job, ENDS[case_of[job.id][0]], case_of[job.id][2]) for job in claimed
    }
    assert store.finish(list(finishes.values()), now=t0 + 3) == []  # every one landed

    wrong = {}
    for job in claimed:
        end, retries, told, on_row = case_of[job.id]
        finish = finishes[job.id]
        expected = (
            str(landed.finished_status(finish, on_row)),
            landed.attempts_after(job.attempt, finish.outcome),
            str(finish.outcome),
        )
        stored = store.get_job(job.id)
        seen = (stored["status"], stored["attempts"], stored["executions"][-1]["outcome"])
        if seen != expected:
            wrong[(end, retries, told, on_row)] = (seen, expected)
    assert not wrong, wrong


def test_every_release_lands_as_the_model_says(store: Store, t0: float) -> None:
    register(store, "w1", t0)
    ids = store.enqueue([new_job(), new_job()], now=t0)
    claimed = claim_all(store, "w1", 2, t0 + 1)
    requested = {ids[1]}
    assert store.cancel_job(ids[1], now=t0 + 2) == "cancel_requested"
    assert store.release([job.lease for job in claimed], now=t0 + 3) == []
    for job in claimed:
        stored = store.get_job(job.id)
        expected = (
            str(landed.released_status(job.id in requested)),
            landed.attempts_after(job.attempt, Outcome.RELEASED),
            str(Outcome.RELEASED),
        )
        assert (stored["status"], stored["attempts"], stored["executions"][-1]["outcome"]) == (
            expected
        )
