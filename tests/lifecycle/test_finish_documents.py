"""A finished attempt's document (`documents.attempt_finish_doc`, what FINISH reads) is
the one `documents.finish_doc` makes of it, for every way an attempt ends: the document
of an end with nothing to check or clean (every success) is written out without
`finish_doc`'s checks, and must not differ from it."""

from __future__ import annotations

import itertools

import pytest

from heartq.errors import PayloadError
from heartq.model import ClaimedJob, Finish, JobStatus, Lease, Outcome
from heartq.store import documents
from tests.lifecycle.cases import RECLAIMED_ENDS, UNSTARTED, WORKER_ENDS, fate

ENDS = [*WORKER_ENDS, *RECLAIMED_ENDS, UNSTARTED]


def claimed(attempt: int) -> ClaimedJob:
    return ClaimedJob(
        id="job", task="task", queue="default", args={}, attempt=attempt, execution_id=3,
        max_retries=2, retry_backoff=1.0, retry_backoff_max=10.0, checkpoint=None,
        lease_expires_at=0.0, worker_id="w1",
    )  # fmt: skip


def checked(finish: Finish) -> dict[str, object]:
    """`finish_doc` of `finish`, every field through its checks."""
    return documents._checked_finish_doc(finish)


@pytest.mark.parametrize(
    ("end", "attempt", "told"), list(itertools.product(ENDS, (1, 3), (False, True)))
)
def test_every_end_has_the_document_finish_doc_makes(end: str, attempt: int, told: bool) -> None:
    finish = fate(claimed(attempt), end, told, on_row=told)
    doc = documents.attempt_finish_doc(finish)
    assert doc == checked(finish)
    assert list(doc) == list(checked(finish))  # the same fields, in the same order


@pytest.mark.parametrize("result", [None, "1", '{"a": [1, 2]}'])
def test_a_success_document(result: str | None) -> None:
    finish = Finish(Lease("j", 7, "w"), Outcome.SUCCEEDED, JobStatus.SUCCEEDED, result)
    doc = documents.attempt_finish_doc(finish)
    assert doc == checked(finish)
    assert doc["status"] == "succeeded" and doc["result"] == result and doc["eid"] == 7


def test_a_delay_that_is_no_float_is_checked() -> None:
    """A retry delay of 0 that is an int is stored as 0.0; one that is a bool is refused,
    as `finish_doc` refuses it."""
    zero = Finish(Lease("j", 1), Outcome.SUCCEEDED, JobStatus.SUCCEEDED, retry_delay=0)
    assert documents.attempt_finish_doc(zero)["delay"] == 0.0
    wrong = Finish(Lease("j", 1), Outcome.SUCCEEDED, JobStatus.SUCCEEDED, retry_delay=False)
    with pytest.raises(PayloadError):
        documents.attempt_finish_doc(wrong)
