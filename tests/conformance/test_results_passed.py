"""Which results a job that takes them receives, and how (docs/design/pipelines.md, "Jobs that
wait for jobs"): each edge says whether its dependency's result is passed as it is, as an
item of a list, or not at all (only waited for), and what is passed is what the
dependency's landed attempt saved, never a superseded attempt's."""

from __future__ import annotations

import pytest

from heartq.errors import ConfigError
from heartq.lifecycle.fate import succeeded
from heartq.model import DetectedBy, JobStatus
from heartq.store import Store

from .support import claim_one, enqueue_one, new_job


def _succeed_all(store: Store, t: float, count: int) -> None:
    """Claim and succeed `count` runnable jobs, each with its `n` argument as result."""
    for i in range(count):
        job = claim_one(store, "w1", t + i)
        assert store.finish([succeeded(job, str(job.args["n"]))], now=t + i) == []


def test_each_edge_passes_its_result_as_the_job_said(store: Store, t0: float) -> None:
    a, b, c = (enqueue_one(store, t0, task="m", args={"n": n}) for n in (1, 2, 3))
    items = enqueue_one(store, t0, depends_on=(a, b, c), dependency_results=True, results_of=(a, c))
    value = enqueue_one(
        store, t0, depends_on=(a, b), dependency_results=True, results_of=(b,), one_result=True
    )
    nothing = enqueue_one(store, t0, depends_on=(a,), dependency_results=True, results_of=())
    every = enqueue_one(store, t0, depends_on=(c, a), dependency_results=True)
    _succeed_all(store, t0 + 1, 3)

    def read(job_id: str) -> list[tuple[str, object, bool]]:
        return [(e.job_id, e.result, e.as_value) for e in store.dependency_results(job_id)]

    assert read(items) == [(a, 1, False), (c, 3, False)]
    assert read(value) == [(b, 2, True)]
    assert read(nothing) == []
    assert read(every) == [(c, 3, False), (a, 1, False)]  # results_of None: all, in order
    assert [store.get_job(i)["status"] for i in (items, value, nothing, every)] == ["queued"] * 4


def test_an_edge_written_before_v21_passes_its_result_as_an_item(store: Store, t0: float) -> None:
    """A callback's edges from before schema v21 have no `result_as` (the migration adds
    the column, NULL): each passes its result as an item, as it did then."""
    a, b = (enqueue_one(store, t0, task="m", args={"n": n}) for n in (1, 2))
    callback = enqueue_one(store, t0, depends_on=(a, b), dependency_results=True)
    table = "heartq_job_dependencies" if "sqlite" in store.link.url else "job_dependencies"
    with store._write() as conn:  # type: ignore[attr-defined]
        conn.execute(f"UPDATE {table} SET result_as = NULL WHERE job_id = '{callback}'")
    _succeed_all(store, t0 + 1, 2)
    assert [(e.result, e.as_value) for e in store.dependency_results(callback)] == [
        (1, False),
        (2, False),
    ]


def test_the_results_taken_must_be_among_the_dependencies(store: Store, t0: float) -> None:
    a, b = enqueue_one(store, t0), enqueue_one(store, t0)
    before = len(store.list_jobs())
    with pytest.raises(ConfigError, match="results_of must name jobs of depends_on"):
        store.enqueue([new_job(depends_on=(a,), dependency_results=True, results_of=(b,))])
    with pytest.raises(ConfigError, match="one_result takes one job's result, not 2"):
        store.enqueue(
            [
                new_job(
                    depends_on=(a, b), dependency_results=True, results_of=(a, b), one_result=True
                )
            ]
        )
    assert len(store.list_jobs()) == before


def test_a_superseded_attempt_s_result_never_reaches_the_dependent(store: Store, t0: float) -> None:
    """The attempt that lost its lease finishes late with its own result: refused, so the
    dependent reads the result of the attempt that took over, and only that."""
    a = enqueue_one(store, t0, args={"n": 1})
    then = enqueue_one(
        store, t0, depends_on=(a,), dependency_results=True, results_of=(a,), one_result=True
    )
    stale = claim_one(store, "w1", t0 + 1, lease=5)
    (reclaimed,) = store.reclaim_expired(DetectedBy.LEASE_EXPIRED, now=t0 + 10)
    assert reclaimed.job_id == a
    current = claim_one(store, "w2", t0 + 11)
    assert current.id == a and current.execution_id > stale.execution_id
    assert store.finish([succeeded(current, '"current"')], now=t0 + 12) == []
    assert store.finish([succeeded(stale, '"superseded"')], now=t0 + 13) == [stale.lease]
    (end,) = store.dependency_results(then)
    assert (end.status, end.result, end.as_value) == (JobStatus.SUCCEEDED, "current", True)
    assert store.get_job(then)["status"] == JobStatus.QUEUED
