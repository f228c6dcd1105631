"""A result handed to the commit, and a result lost (docs/design/pipelines.md, "Effects exactly
once"): a task's transaction that carries its result (`completing(..., result=)`)
stores it with the completion, so no reader ever waits for it and no reaper gives it up;
a result that is lost all the same (given up by a reaper once the committing attempt's
lease ran out, or its code failed after the commit) says so, to `job_end` (what
`App.result` reads), to `dependency_results` (what a callback receives) and to
`get_job`, never as a bare None."""

from __future__ import annotations

import pytest

from heartq import lost_results
from heartq.errors import ResultLost
from heartq.model import DetectedBy, JobStatus
from heartq.results import outcome
from heartq.store import Store

from .support import claim_one, enqueue_one


def test_a_result_handed_to_the_commit_lands_with_it(store: Store) -> None:
    t = store.clock() - 100  # the attempt's 5 s lease ran out 95 s ago
    a = enqueue_one(store, t)
    b = enqueue_one(store, t, depends_on=(a,), dependency_results=True)
    job = claim_one(store, "w1", t + 1, lease=5)
    with store.completing(job.lease, result=lambda: '{"n": 1}'):
        pass
    end = store.job_end(a)
    assert end.ended and not end.result_pending and end.result_lost is None
    assert outcome(end) == {"n": 1}
    (dep,) = store.dependency_results(b)
    assert (dep.status, dep.result, dep.pending, dep.lost) == (JobStatus.SUCCEEDED, {"n": 1},
                                                              False, None)  # fmt: skip
    # nothing left for a reaper to give up, nor for a save to write over
    assert store.reclaim_expired(DetectedBy.LEASE_EXPIRED) == []
    assert not store.save_result(job.lease, '{"n": 2}')
    done = store.get_job(a)
    assert (done["result"], done["result_lost"]) == ({"n": 1}, None)


def test_a_handed_none_is_a_result(store: Store) -> None:
    """`ctx.commit_result(None)`: the task's own None, not a lost result."""
    t = store.clock()
    a = enqueue_one(store, t)
    job = claim_one(store, "w1", t)
    with store.completing(job.lease, result=lambda: "null"):
        pass
    end = store.job_end(a)
    assert end.ended and end.result is None and end.result_lost is None


def test_a_result_given_up_by_a_reaper_is_lost_for_every_reader(store: Store) -> None:
    t = store.clock() - 100
    a = enqueue_one(store, t)
    b = enqueue_one(store, t, depends_on=(a,), dependency_results=True)
    job = claim_one(store, "w1", t + 1, lease=5)
    with store.completing(job.lease, result=lambda: None):  # none handed: saved after
        pass
    assert store.job_end(a).result_pending
    assert store.reclaim_expired(DetectedBy.LEASE_EXPIRED) == []
    end = store.job_end(a)
    assert end.ended and end.result_lost == lost_results.AFTER_COMMIT
    with pytest.raises(ResultLost, match="its result was lost: its worker stopped") as lost:
        outcome(end)
    assert (lost.value.job_id, lost.value.reason) == (a, lost_results.AFTER_COMMIT)
    (dep,) = store.dependency_results(b)
    assert dep.status is JobStatus.SUCCEEDED and dep.lost == lost_results.AFTER_COMMIT
    assert store.get_job(a)["result_lost"] == lost_results.AFTER_COMMIT
    assert not store.save_result(job.lease, '{"n": 1}')  # too late: refused, still lost
    assert store.job_end(a).result_lost == lost_results.AFTER_COMMIT


def test_a_result_lost_by_code_that_failed_after_the_commit(store: Store) -> None:
    t = store.clock()
    a = enqueue_one(store, t)
    job = claim_one(store, "w1", t)
    with store.completing(job.lease):
        pass
    why = lost_results.failed_after_commit("failed", "ValueError: after")
    assert store.save_result(job.lease, None, why)
    end = store.job_end(a)
    assert end.ended and end.result is None and end.result_lost == why
    assert store.get_job(a)["result_lost"] == why


def test_a_returned_none_is_not_lost(store: Store) -> None:
    t = store.clock()
    a = enqueue_one(store, t)
    job = claim_one(store, "w1", t)
    with store.completing(job.lease):
        pass
    assert store.save_result(job.lease, "null")
    end = store.job_end(a)
    assert end.ended and end.result is None and end.result_lost is None
    assert outcome(end) is None
