"""A job's fate is written once: every way an attempt can end that reaches FINISH or
RELEASE goes through heartq.lifecycle on one side and each dialect's statements on the
other, and the job must end where the model says (its status, its count of attempts, its
execution's outcome). The ends: each the worker decides (`fate.decide`), under each retry
policy, with a cancel requested or not (told to the worker, or only on the job's row);
each a reclaimer decides (`crash.after`: a crash, an interruption, the interruption
that buries the job, a job claimed ahead and never started); a release at shutdown, of a
first attempt, a later one, one claimed ahead. The statements restate two of the model's
rules in SQL (a retry after a cancel request ends the job cancelled; interrupted and
released attempts are not counted: `lifecycle.fate`'s landing rules), so that they hold inside the
fenced write: this is what keeps the two from drifting apart. tests/lifecycle/ holds the
model to the table of docs/design/job-states.md without a database."""

from __future__ import annotations

import itertools

from heartq.lifecycle.fate import attempts_after, finished_status, released_status
from heartq.model import ClaimedJob, DetectedBy, Finish, Outcome
from heartq.store import Store
from tests.lifecycle.cases import CRASH, RECLAIMED_ENDS, UNSTARTED, WORKER_ENDS, fate

from .support import new_job, register

LEASE = 600.0

CASES = list(itertools.product(WORKER_ENDS, (0, 2), (False, True), (False, True)))
"""(end, max_retries, cancel told to the worker, cancel on the job's row): a first attempt
with no retry left, or with two."""

RECLAIM_CASES = [
    *itertools.product(RECLAIMED_ENDS, (0, 2), (False, True)),
    *itertools.product((UNSTARTED,), (2,), (False, True)),
]
"""(end, max_retries, cancel on the job's row): what a reclaimer finds is the row."""

RELEASE_CASES = list(itertools.product(("first", "second", "ahead"), (False, True)))
"""(which attempt is given back: a first, a second, one claimed ahead; cancel on the row)."""


def claim_and_cancel(
    store: Store, ids: list[str], ahead: set[str], cancel: set[str], now: float
) -> list[ClaimedJob]:
    """Claim `ids` (those in `ahead` claimed ahead, never started; the others started),
    then request the cancel of those in `cancel`: on their rows, their worker not told."""
    started = store.claim_ids("w1", [i for i in ids if i not in ahead], LEASE, now=now)
    claimed = [*started, *store.claim("w1", ["default"], 0, LEASE, now=now, ahead=len(ids)).ahead]
    assert sorted(job.id for job in claimed) == sorted(ids)
    for job_id in cancel:
        assert store.cancel_job(job_id, now=now + 1) == "cancel_requested"
    return claimed


def modelled(job: ClaimedJob, finish: Finish, on_row: bool) -> tuple[str, int, str]:
    """Where heartq.lifecycle says `job` ends once FINISH saves `finish` on its row, with a
    cancel requested there or not (`on_row`)."""
    return (
        str(finished_status(finish, on_row)),
        attempts_after(job.attempt, finish.outcome),
        str(finish.outcome),
    )


def ended(store: Store, job_id: str) -> tuple[str, int, str]:
    """The job as the statements left it: status, attempts, its last execution's outcome."""
    stored = store.get_job(job_id)
    return stored["status"], stored["attempts"], stored["executions"][-1]["outcome"]


def test_every_finish_lands_as_the_model_says(store: Store, t0: float) -> None:
    register(store, "w1", t0)
    ids = store.enqueue(
        [new_job(max_retries=retries, retry_backoff=0.0) for _, retries, _, _ in CASES], now=t0
    )
    case_of = dict(zip(ids, CASES, strict=True))
    claimed = claim_and_cancel(store, ids, set(), {i for i in ids if case_of[i][3]}, t0 + 1)
    finishes = {
        job.id: fate(job, case_of[job.id][0], case_of[job.id][2], case_of[job.id][3])
        for job in claimed
    }
    assert store.finish(list(finishes.values()), now=t0 + 3) == []  # every one landed

    wrong = {}
    for job in claimed:
        end, retries, told, on_row = case_of[job.id]
        expected = modelled(job, finishes[job.id], on_row)
        seen = ended(store, job.id)
        if seen != expected:
            wrong[(end, retries, told, on_row)] = (seen, expected)
    assert not wrong, wrong


def test_every_reclaimed_attempt_lands_as_the_model_says(store: Store, t0: float) -> None:
    register(store, "w1", t0)
    ids = store.enqueue(
        [new_job(max_retries=retries, retry_backoff=0.0) for _, retries, _ in RECLAIM_CASES],
        now=t0,
    )
    case_of = dict(zip(ids, RECLAIM_CASES, strict=True))
    for job_id, (end, _, _) in case_of.items():  # the interruptions before the last one
        for _ in range(RECLAIMED_ENDS.get(end, (None, 0))[1]):
            (job,) = store.claim_ids("w1", [job_id], LEASE, now=t0 + 1)
            assert store.crash_attempt(job.lease, CRASH, DetectedBy.SELF_FENCE, now=t0 + 1)
    ahead = {i for i in ids if case_of[i][0] == UNSTARTED}
    claimed = claim_and_cancel(store, ids, ahead, {i for i in ids if case_of[i][2]}, t0 + 2)

    wrong = {}
    for job in claimed:
        end, retries, on_row = case_of[job.id]
        found_by = RECLAIMED_ENDS[end][0] if end in RECLAIMED_ENDS else DetectedBy.CHILD_EXIT
        reported = store.crash_attempt(job.lease, CRASH, found_by, now=t0 + 4)
        assert reported is not None, (end, retries, on_row)
        expected = modelled(job, fate(job, end, False, on_row), on_row)
        seen = ended(store, job.id)
        said = str(reported.status)  # what the reclaim reports (hooks, events) is what landed
        if seen != expected or said != seen[0]:
            wrong[(end, retries, on_row)] = (seen, expected, said)
    assert not wrong, wrong


def test_every_release_lands_as_the_model_says(store: Store, t0: float) -> None:
    register(store, "w1", t0)
    ids = store.enqueue([new_job(max_retries=2) for _ in RELEASE_CASES], now=t0)
    case_of = dict(zip(ids, RELEASE_CASES, strict=True))
    seconds = [i for i in ids if case_of[i][0] == "second"]
    for job in store.claim_ids("w1", seconds, LEASE, now=t0 + 1):  # a first crash: counted
        assert store.crash_attempt(job.lease, CRASH, DetectedBy.CHILD_EXIT, now=t0 + 1)
    ahead = {i for i in ids if case_of[i][0] == "ahead"}
    claimed = claim_and_cancel(store, ids, ahead, {i for i in ids if case_of[i][1]}, t0 + 2)
    assert store.release([job.lease for job in claimed], now=t0 + 4) == []

    wrong = {}
    for job in claimed:
        which, on_row = case_of[job.id]
        expected = (
            str(released_status(on_row)),
            attempts_after(job.attempt, Outcome.RELEASED),
            str(Outcome.RELEASED),
        )
        seen = ended(store, job.id)
        if seen != expected:
            wrong[(which, on_row)] = (seen, expected)
    assert not wrong, wrong
