"""Every way an attempt can end, for the tests that hold a job's fate to one table: the
fate table here (tests/lifecycle/test_fate_table.py) and each dialect's statements
(tests/conformance/test_landed.py) walk the same ends."""

from __future__ import annotations

import dataclasses

from heartq.lifecycle import crash
from heartq.lifecycle.fate import AttemptEnd, CannotRun, decide
from heartq.model import ClaimedJob, DetectedBy, Finish, JobStatus, Outcome

WORKER_ENDS = {
    "succeeded": AttemptEnd(Outcome.SUCCEEDED, result_json="1"),
    "failed": AttemptEnd(Outcome.FAILED, error="RuntimeError: boom"),
    "permanent": AttemptEnd(Outcome.FAILED, error="Permanent: no", permanent=True),
    "timed_out": AttemptEnd(Outcome.TIMED_OUT, error="timed out after 1 s"),
    "cancelled": AttemptEnd(Outcome.CANCELLED, error="cancelled"),
    "bad_arguments": AttemptEnd(Outcome.FAILED, error="x", cannot_run=CannotRun.ARGUMENTS),
    "not_declared": AttemptEnd(Outcome.FAILED, error="x", cannot_run=CannotRun.TASK_NOT_DECLARED),
    "task_elsewhere": AttemptEnd(Outcome.FAILED, error="x", cannot_run=CannotRun.TASK_ELSEWHERE),
    "snoozed": AttemptEnd(Outcome.SNOOZED, error="snoozed for 5 s", snooze_for=5.0),
    "snoozed_past_bound": AttemptEnd(Outcome.SNOOZED, error="snoozed for 5 s", snooze_for=5.0),
    "expired": AttemptEnd(Outcome.FAILED, error="expired: x", cannot_run=CannotRun.EXPIRED),
}
"""Every way the worker can end an attempt whose fate it decides (`fate.decide`), saved
by FINISH."""

AT_THE_BOUND = frozenset({"snoozed_past_bound"})
"""Ends of a job that has snoozed its task's `max_snoozes` times already (a snooze now is
a failed attempt)."""

RECLAIMED_ENDS = {
    "crashed": (DetectedBy.CHILD_EXIT, 0),
    "interrupted": (DetectedBy.SELF_FENCE, 0),
    "interrupted_21st": (DetectedBy.SELF_FENCE, 20),
}
"""Every way a reclaimer can end an attempt (`crash.after`), saved by FINISH: who
found it, and how many of the job's attempts were interrupted before this one (the
21st interruption in a row buries the job: `MAX_INTERRUPTIONS`). A crash is a crash
whoever found it (`crash.ended_by`); the database's bad days are `SELF_FENCE`,
which is also how a task that could not reach the database is given back."""

UNSTARTED = "claimed_ahead_unstarted"
"""A job claimed ahead whose start was never recorded, reclaimed: outcome `released`,
saved by FINISH with its status `queued` (docs/design/claim.md, "Claim ahead")."""

RELEASED = "released"
"""An attempt given back at shutdown: RELEASE."""


def fate(job: ClaimedJob, end: str, told: bool, on_row: bool) -> Finish:
    """What heartq.lifecycle makes of `job`'s attempt ending `end`, before the store applies
    it to the row (`finished_status`): the worker's own decision (`told`: it knew of a
    cancel), or a reclaimer's, which reads the cancel on the row it holds (`on_row`). Not a
    release at shutdown: that is `released_status`."""
    if end in WORKER_ENDS:
        if end in AT_THE_BOUND:
            job = dataclasses.replace(job, snoozes=job.max_snoozes)
        return decide(job, WORKER_ENDS[end], told)
    if end == UNSTARTED:
        return Finish(job.lease, Outcome.RELEASED, JobStatus.QUEUED)
    detected_by, interruptions = RECLAIMED_ENDS[end]
    outcome = crash.ended_by(detected_by)
    held = crash.HeldJob(
        attempts=job.attempt,
        max_retries=job.max_retries,
        retry_backoff=job.retry_backoff,
        retry_backoff_max=job.retry_backoff_max,
        crashes=0,
        interruptions=interruptions,
        cancel_requested=on_row,
    )
    verdict = crash.after(held, outcome, CRASH)
    return Finish(job.lease, outcome, verdict.status, dead_reason=verdict.dead_reason)


CRASH = {"reason": "the test ended it"}
"""The crash context of every reclaimed attempt here."""
