"""Claim ahead (a worker's prefetch buffer), at the store: jobs claimed ahead are leased
and renewed like running ones, but until their start is recorded (`start_ahead`) a
reclaim gives them back with no attempt counted and no crash recorded; a started one
counts its attempt. docs/design/claim.md, "Claim ahead"."""

from __future__ import annotations

from heartq.model import DetectedBy, JobStatus, Outcome, Renewal, RenewStatus
from heartq.store import Store

from .support import LEASE, enqueue_one, register


def _enqueue(store: Store, t0: float, n: int, **options: object) -> list[str]:
    return [enqueue_one(store, t0, task="t", **options) for _ in range(n)]


def test_a_claim_takes_jobs_ahead_after_the_slots_best_first(store: Store, t0: float) -> None:
    register(store, "w1", t0)
    low = _enqueue(store, t0, 3, priority=0)
    high = _enqueue(store, t0, 2, priority=5)
    claim = store.claim("w1", ["default"], 2, LEASE, now=t0 + 1, ahead=2)

    assert [j.id for j in claim] == high  # the slots get the best jobs
    assert [j.id for j in claim.ahead] == low[:2]
    for job_id in low[:2]:
        job = store.get_job(job_id)
        assert job["status"] == JobStatus.RUNNING
        assert job["worker_id"] == "w1"
        assert job["claimed_ahead"] is True
    assert store.get_job(high[0])["claimed_ahead"] is False
    assert store.get_job(low[2])["status"] == JobStatus.QUEUED
    # with no free slot, a claim can take jobs ahead only
    more = store.claim("w1", ["default"], 0, LEASE, now=t0 + 2, ahead=5)
    assert list(more) == [] and [j.id for j in more.ahead] == [low[2]]


def test_jobs_claimed_ahead_are_renewed_by_the_heartbeat(store: Store, t0: float) -> None:
    register(store, "w1", t0)
    _enqueue(store, t0, 1)
    (job,) = store.claim("w1", ["default"], 0, LEASE, now=t0, ahead=1).ahead
    answers = store.heartbeat("w1", [Renewal(job.lease)], LEASE, now=t0 + LEASE - 1)
    assert answers == {job.lease: RenewStatus.RENEWED}
    # renewed: not expired at the first lease's end
    assert store.reclaim_expired(DetectedBy.LEASE_EXPIRED, now=t0 + LEASE + 1) == []


def test_a_dead_workers_jobs_claimed_ahead_go_back_uncounted(store: Store, t0: float) -> None:
    register(store, "w1", t0)
    first, second, third = _enqueue(store, t0, 3)
    claim = store.claim("w1", ["default"], 1, LEASE, now=t0, ahead=2)
    assert [j.id for j in claim] == [first]
    started_ahead = claim.ahead[0]
    assert store.start_ahead([started_ahead.lease], LEASE, now=t0 + 1) == [started_ahead.lease]

    reclaimed = store.reclaim_worker("w1", DetectedBy.LIVENESS_LOCK, "gone", now=t0 + 2)
    assert {r.job_id for r in reclaimed} == {first, second, third}

    for job_id in (first, second):  # started: the attempt counts, the crash is recorded
        job = store.get_job(job_id)
        assert job["status"] == JobStatus.QUEUED
        assert job["attempts"] == 1
        assert job["executions"][-1]["outcome"] == Outcome.CRASHED
    never_ran = store.get_job(third)  # claimed ahead, never started
    assert never_ran["status"] == JobStatus.QUEUED
    assert never_ran["attempts"] == 0
    assert never_ran["worker_id"] is None
    assert never_ran["claimed_ahead"] is False
    execution = never_ran["executions"][-1]
    assert execution["outcome"] == Outcome.RELEASED
    assert execution["crash"] is None
    assert [r.attempts for r in reclaimed if r.job_id == third] == [0]
    # and it runs again as a first attempt
    again = store.claim("w2", ["default"], 3, LEASE, now=t0 + 3)
    assert {j.id: j.attempt for j in again}[third] == 1


def test_an_expired_lease_of_a_job_claimed_ahead_counts_no_attempt(
    store: Store, t0: float
) -> None:
    register(store, "w1", t0)
    (job_id,) = _enqueue(store, t0, 1)
    (job,) = store.claim("w1", ["default"], 0, LEASE, now=t0, ahead=1).ahead
    (reclaimed,) = store.reclaim_expired(DetectedBy.LEASE_EXPIRED, now=t0 + LEASE + 1)
    assert reclaimed.job_id == job_id and reclaimed.status is JobStatus.QUEUED
    after = store.get_job(job_id)
    assert after["status"] == JobStatus.QUEUED and after["attempts"] == 0
    assert after["executions"][-1]["outcome"] == Outcome.RELEASED
    assert store.start_ahead([job.lease], LEASE, now=t0 + LEASE + 2) == []  # lost: never runs


def test_a_stale_workers_jobs_claimed_ahead_go_back_uncounted(store: Store, t0: float) -> None:
    register(store, "w1", t0)
    (job_id,) = _enqueue(store, t0, 1)
    store.claim("w1", ["default"], 0, LEASE, now=t0, ahead=1)
    (stale,) = store.mark_stale_workers(60, DetectedBy.STALE_WORKER, now=t0 + 61)
    assert [r.job_id for r in stale.reclaimed] == [job_id]
    after = store.get_job(job_id)
    assert after["status"] == JobStatus.QUEUED and after["attempts"] == 0
    assert after["executions"][-1]["crash"] is None


def test_a_cancel_of_a_job_claimed_ahead_ends_it_cancelled_unstarted(
    store: Store, t0: float
) -> None:
    register(store, "w1", t0)
    (job_id,) = _enqueue(store, t0, 1)
    (job,) = store.claim("w1", ["default"], 0, LEASE, now=t0, ahead=1).ahead
    store.cancel_job(job_id, now=t0 + 1, by="operator")
    answers = store.heartbeat("w1", [Renewal(job.lease)], LEASE, now=t0 + 2)
    assert answers == {job.lease: RenewStatus.CANCEL_REQUESTED}
    assert store.cancel_requests("w1", [job.lease]) == [job.lease]
    assert store.start_ahead([job.lease], LEASE, now=t0 + 3) == []  # refused: never runs
    assert store.release([job.lease], now=t0 + 4) == []  # what the worker does with it
    after = store.get_job(job_id)
    assert after["status"] == JobStatus.CANCELLED
    assert after["attempts"] == 0


def test_a_cancelled_job_claimed_ahead_of_a_dead_worker_ends_cancelled(
    store: Store, t0: float
) -> None:
    register(store, "w1", t0)
    (job_id,) = _enqueue(store, t0, 1)
    store.claim("w1", ["default"], 0, LEASE, now=t0, ahead=1)
    store.cancel_job(job_id, now=t0 + 1)
    (reclaimed,) = store.reclaim_worker("w1", DetectedBy.LIVENESS_LOCK, "gone", now=t0 + 2)
    assert reclaimed.status is JobStatus.CANCELLED
    after = store.get_job(job_id)
    assert after["status"] == JobStatus.CANCELLED and after["attempts"] == 0


def test_start_ahead_is_fenced_and_starts_once(store: Store, t0: float) -> None:
    register(store, "w1", t0)
    _enqueue(store, t0, 2)
    one, two = store.claim("w1", ["default"], 0, LEASE, now=t0, ahead=2).ahead
    assert store.start_ahead([one.lease], LEASE, now=t0 + 1) == [one.lease]
    assert store.start_ahead([one.lease, two.lease], LEASE, now=t0 + 2) == [two.lease]
    started = store.get_job(two.id)
    assert started["claimed_ahead"] is False
    # the start renews the lease from the moment it is recorded
    assert store.reclaim_expired(DetectedBy.LEASE_EXPIRED, now=t0 + LEASE + 1) == []


def test_graceful_release_of_jobs_claimed_ahead_counts_no_attempt(
    store: Store, t0: float
) -> None:
    register(store, "w1", t0)
    (job_id,) = _enqueue(store, t0, 1)
    (job,) = store.claim("w1", ["default"], 0, LEASE, now=t0, ahead=1).ahead
    assert store.release([job.lease], now=t0 + 1) == []
    after = store.get_job(job_id)
    assert after["status"] == JobStatus.QUEUED and after["attempts"] == 0


def test_keyed_jobs_are_never_claimed_ahead(store: Store, t0: float) -> None:
    register(store, "w1", t0)
    enqueue_one(store, t0, task="t", concurrency_key="k", concurrency_limit=5)
    claim = store.claim("w1", ["default"], 0, LEASE, now=t0, ahead=3)
    assert list(claim) == [] and claim.ahead == []


def test_the_operators_reads_tell_jobs_claimed_ahead_from_started_ones(
    store: Store, t0: float
) -> None:
    """`list_jobs` and `browse_jobs` filter on it, `job_counts` counts them apart within
    each queue's running jobs (the same statement), `list_workers` counts each worker's
    started and claimed-ahead jobs apart: what `heartq.inspect` shows as `claimed`."""
    register(store, "w1", t0)
    register(store, "w2", t0)
    first, second, third = _enqueue(store, t0, 3)
    claim = store.claim("w1", ["default"], 1, LEASE, now=t0, ahead=2)
    assert [j.id for j in claim] == [first]
    other = enqueue_one(store, t0, task="t", queue="other")
    store.claim("w2", ["other"], 1, LEASE, now=t0)

    def ids(jobs: list[dict[str, object]]) -> list[object]:
        return sorted(j["id"] for j in jobs)

    assert ids(store.list_jobs(status="running", claimed_ahead=True)) == sorted([second, third])
    assert ids(store.list_jobs(status="running", claimed_ahead=False)) == sorted([first, other])
    assert ids(store.list_jobs(status="running")) == sorted([first, second, third, other])
    page = store.browse_jobs(status="running", claimed_ahead=True)
    assert ids(page.jobs) == sorted([second, third])
    page = store.browse_jobs(status="running", queue="default", claimed_ahead=False)
    assert ids(page.jobs) == [first]

    counts = {(c.queue, c.status): (c.count, c.claimed_ahead) for c in store.job_counts()}
    assert counts == {("default", "running"): (3, 2), ("other", "running"): (1, 0)}
    assert sorted(store.count_jobs()) == [("default", "running", 3), ("other", "running", 1)]
    held = {w["id"]: (w["running"], w["claimed_ahead"]) for w in store.list_workers()}
    assert held == {"w1": (1, 2), "w2": (1, 0)}

    # started: no longer claimed ahead, anywhere
    assert store.start_ahead([claim.ahead[0].lease], LEASE, now=t0 + 1) == [claim.ahead[0].lease]
    assert ids(store.list_jobs(status="running", claimed_ahead=True)) == [third]
    counts = {(c.queue, c.status): (c.count, c.claimed_ahead) for c in store.job_counts()}
    assert counts[("default", "running")] == (3, 1)
    held = {w["id"]: (w["running"], w["claimed_ahead"]) for w in store.list_workers()}
    assert held["w1"] == (2, 1)
