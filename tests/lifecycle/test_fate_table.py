"""A job's fate, as docs/design/job-states.md tabulates it ("An execution": how an attempt ended
-> the job afterwards; "whatever the outcome, a job whose cancel was requested ends cancelled
instead of being queued again"), held against heartq.lifecycle without a database: every
way an attempt ends, with retries left or none, a cancel told to the worker or not, a
cancel on the job's row or not -> the job's status, and whether the attempt counts.

tests/conformance/test_landed.py then holds each dialect's FINISH and RELEASE to
heartq.lifecycle over the same ends: the table, the model and the SQL agree."""

from __future__ import annotations

import itertools

import pytest

from heartq.lifecycle.fate import attempts_after, finished_status, released_status
from heartq.model import ClaimedJob, Outcome
from tests.lifecycle.cases import RECLAIMED_ENDS, RELEASED, UNSTARTED, WORKER_ENDS, fate

NO_CANCEL = {
    # how the attempt ended:  (retries left, none left,  the attempt counts)
    "succeeded": ("succeeded", "succeeded", True),
    "failed": ("queued", "dead", True),
    "permanent": ("dead", "dead", True),
    "timed_out": ("queued", "dead", True),
    "cancelled": ("cancelled", "cancelled", True),
    "bad_arguments": ("dead", "dead", True),
    "not_declared": ("dead", "dead", True),
    "task_elsewhere": ("queued", "queued", False),  # waits for a worker that knows the task
    "snoozed": ("queued", "queued", False),  # after the delay its task asked for
    "snoozed_past_bound": ("queued", "dead", True),  # past max_snoozes: a failed attempt
    "expired": ("cancelled", "cancelled", False),  # past its expiry: never run, not counted
    "crashed": ("queued", "dead", True),
    "interrupted": ("queued", "queued", False),
    "interrupted_21st": ("dead", "dead", False),
    UNSTARTED: ("queued", "queued", False),
    RELEASED: ("queued", "queued", False),
}
"""The job afterwards when no cancel was requested."""

CANCELLED_WHEN_TOLD = frozenset(
    {"failed", "permanent", "bad_arguments", "not_declared", "task_elsewhere", "snoozed",
     "snoozed_past_bound"}
)  # fmt: skip
"""The ends the worker makes `cancelled` (a counted attempt) when it had told the task of
a cancel: a failure, or a snooze, after a cancel request is a cancel."""

CANCELLED_WHEN_RECLAIMED = frozenset(RECLAIMED_ENDS)
"""The ends a reclaimer decides, reading the cancel on the row it holds: a job whose cancel
was requested is cancelled even where its attempt would have made it dead. A worker that
ends an attempt itself, not yet told of the cancel, decides by what it knows, and the
store turns only a retry into a cancel: that job can end dead."""


def design(end: str, retries_left: bool, told: bool, on_row: bool) -> tuple[str, bool]:
    """What docs/design/job-states.md says becomes of the job, and whether the attempt counts."""
    if told and end in CANCELLED_WHEN_TOLD:
        return "cancelled", True
    with_retries, without, counted = NO_CANCEL[end]
    status = with_retries if retries_left else without
    if on_row and (status == "queued" or end in CANCELLED_WHEN_RECLAIMED):
        status = "cancelled"  # whatever the outcome: never queued again
    return status, counted


def lifecycle(end: str, retries_left: bool, told: bool, on_row: bool) -> tuple[str, bool]:
    """What heartq.lifecycle makes of the job's first attempt (`max_retries` 2 or 0)
    ending `end`, as the store applies it to the row (`finished_status`, `released_status`)."""
    if end == RELEASED:
        status = released_status(on_row)
        return str(status), attempts_after(1, Outcome.RELEASED) == 1
    finish = fate(_first_attempt(2 if retries_left else 0), end, told, on_row)
    status = finished_status(finish, on_row)
    return str(status), attempts_after(1, finish.outcome) == 1


def _first_attempt(max_retries: int) -> ClaimedJob:
    return ClaimedJob(
        id="job",
        task="task",
        queue="default",
        args={},
        attempt=1,
        execution_id=1,
        max_retries=max_retries,
        retry_backoff=0.0,
        retry_backoff_max=0.0,
        checkpoint=None,
        lease_expires_at=0.0,
        worker_id="w1",
    )


def _cases() -> list[tuple[str, bool, bool, bool]]:
    """Every end x retries left or not x cancel told or not (only the worker's own ends
    can be told: a reclaimer and a release read the row) x cancel on the row or not."""
    cases = []
    for end in NO_CANCEL:
        told = (False, True) if end in WORKER_ENDS else (False,)
        cases += itertools.product((end,), (True, False), told, (False, True))
    return cases


def test_the_table_covers_every_end() -> None:
    assert set(NO_CANCEL) == {*WORKER_ENDS, *RECLAIMED_ENDS, UNSTARTED, RELEASED}


@pytest.mark.parametrize(("end", "retries_left", "told", "on_row"), _cases())
def test_lifecycle_decides_as_the_table_says(
    end: str, retries_left: bool, told: bool, on_row: bool
) -> None:
    assert lifecycle(end, retries_left, told, on_row) == design(end, retries_left, told, on_row)


def test_a_dead_reason_counts_as_english() -> None:
    """One attempt, one worker: singular (it said "crashed 1 workers in 1 attempts")."""
    from heartq.lifecycle.fate import dead_reason
    from heartq.model import Outcome

    crash = dead_reason(Outcome.CRASHED, 1, "lease expired", crashes=1)
    assert crash == "crashed 1 worker in 1 attempt; last: lease expired"
    assert dead_reason(Outcome.CRASHED, 2, "x", crashes=2).startswith("crashed 2 workers in 2 ")
    assert dead_reason(Outcome.CRASHED, 3, "x", crashes=1) == (
        "retries exhausted after 3 attempts (1 crashed); last: x"
    )
    assert dead_reason(Outcome.TIMED_OUT, 1, "timed out after 2 s") == (
        "timed out on its only attempt; timed out after 2 s"
    )
    assert dead_reason(Outcome.TIMED_OUT, 4, "t").startswith("timed out on the last of 4 ")
    assert dead_reason(Outcome.FAILED, 1, "E: x") == "failed 1 attempt; last error: E: x"
