"""What a job becomes when the end of its attempt lands in the store.

The worker decides an attempt's fate (`fate.decide`) from what it knows; the store applies
it to the job's row as the row stands when the write lands, which may know one thing more:
a cancel requested since the worker last looked (its pulse reads requests about once a
second). Two rules follow, and each dialect's FINISH and RELEASE statements write them in
SQL (their `CASE` expressions), because they must hold in the same statement that fences
the write:

- a retry while a cancel is requested ends the job `cancelled` instead: the request is
  honoured, never lost to a retry (the execution keeps its own outcome);
- an attempt that did not run the task's code to an end of its own is not counted: an
  `interrupted` one (its worker lost the database) and a `released` one (given back at
  shutdown, or for a worker that knows its task).

These functions are those rules as the model says them; tests/conformance/test_landed.py
walks every way an attempt can end that reaches FINISH or RELEASE (the worker's, a
reclaimer's, a release), under each policy and cancel state, through `fate.decide` or
`crash.after`, these, and each dialect's statements, and fails on any disagreement;
tests/lifecycle/test_fate_table.py holds them to docs/DESIGN.md's table.
"""

from __future__ import annotations

from heartq.model import Finish, JobStatus, Outcome

NOT_COUNTED = frozenset({Outcome.INTERRUPTED, Outcome.RELEASED})
"""Outcomes of executions that do not count as attempts of the job."""


def finished_status(finish: Finish, cancel_requested: bool) -> JobStatus:
    """The job's status once `finish` lands on a row whose `cancel_requested` is as given."""
    if finish.status is JobStatus.QUEUED and cancel_requested:
        return JobStatus.CANCELLED
    return finish.status


def released_status(cancel_requested: bool) -> JobStatus:
    """The job's status once a release of its attempt lands (the worker gives it back,
    unstarted or at shutdown): queued again, or cancelled if a cancel was requested."""
    return JobStatus.CANCELLED if cancel_requested else JobStatus.QUEUED


def attempts_after(attempts: int, outcome: Outcome) -> int:
    """The job's count of attempts once an execution that ended `outcome` lands (the
    claim counted it: one not counted is taken back)."""
    return max(attempts - 1, 0) if outcome in NOT_COUNTED else attempts
