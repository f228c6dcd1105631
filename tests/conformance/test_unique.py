"""Unique jobs: one job per key while it is queued or running, and, with `unique_for`,
while it finished within the window; racing enqueuers in many processes get one job."""

from __future__ import annotations

from heartq.lifecycle.fate import failed, succeeded
from heartq.model import JobStatus, Outcome
from heartq.store import Store
from tests.conformance.procs import run_processes, unique_enqueuer

from .support import claim_one, new_job

KEY = "report:42"


def enqueue_keyed(store: Store, now: float, key: str = KEY, **options: object) -> str:
    (job_id,) = store.enqueue([new_job("report", unique_key=key, **options)], now=now)
    return job_id


def test_a_queued_or_running_job_holds_its_key(store: Store, t0: float) -> None:
    first = enqueue_keyed(store, t0)
    assert enqueue_keyed(store, t0 + 1) == first  # queued: the same id, nothing stored
    claim_one(store, "w1", t0 + 2)
    assert enqueue_keyed(store, t0 + 3) == first  # running: still the same
    assert len(store.list_jobs(limit=10)) == 1
    assert store.get_job(first)["unique_key"] == KEY
    assert enqueue_keyed(store, t0 + 3, key="report:43") != first  # another key


def test_the_key_is_free_once_the_job_ended(store: Store, t0: float) -> None:
    first = enqueue_keyed(store, t0)
    job = claim_one(store, "w1", t0 + 1)
    assert store.finish([succeeded(job, None)], now=t0 + 2) == []
    second = enqueue_keyed(store, t0 + 3)
    assert second != first
    assert store.get_job(second)["status"] == JobStatus.QUEUED


def test_unique_for_counts_jobs_finished_within_the_window(store: Store, t0: float) -> None:
    first = enqueue_keyed(store, t0, unique_for=60.0)
    job = claim_one(store, "w1", t0 + 1)
    store.finish([succeeded(job, None)], now=t0 + 10)
    assert enqueue_keyed(store, t0 + 20, unique_for=60.0) == first  # 10 s after its end
    assert enqueue_keyed(store, t0 + 69, unique_for=60.0) == first  # 59 s after
    # the window is the caller's: a shorter one no longer counts it
    later = enqueue_keyed(store, t0 + 40, unique_for=5.0)
    assert later != first
    assert enqueue_keyed(store, t0 + 41, unique_for=60.0) == later  # the live one wins


def test_past_the_window_a_new_job_is_stored(store: Store, t0: float) -> None:
    first = enqueue_keyed(store, t0, unique_for=60.0)
    job = claim_one(store, "w1", t0 + 1)
    store.finish([succeeded(job, None)], now=t0 + 10)
    second = enqueue_keyed(store, t0 + 71, unique_for=60.0)
    assert second != first
    assert {j["id"] for j in store.list_jobs(limit=10)} == {first, second}


def test_a_cancelled_job_frees_its_key(store: Store, t0: float) -> None:
    first = enqueue_keyed(store, t0)
    store.cancel_job(first, by="test", now=t0 + 1)
    assert enqueue_keyed(store, t0 + 2) != first


def test_one_batch_with_one_key_makes_one_job(store: Store, t0: float) -> None:
    jobs = [new_job("report", {"i": i}, unique_key=KEY) for i in range(3)]
    jobs.append(new_job("report", {"i": 9}))
    ids = store.enqueue(jobs, now=t0)
    assert ids[0] == ids[1] == ids[2] != ids[3]
    assert store.get_job(ids[0])["args"] == {"i": 0}
    assert len(store.list_jobs(limit=10)) == 2


def test_eight_processes_racing_on_one_key_get_one_job(store: Store, store_url: str) -> None:
    got = [ids[0] for ids in run_processes(unique_enqueuer, [(store_url, KEY)] * 8)]
    assert len(set(got)) == 1, got
    jobs = store.list_jobs(limit=100)
    assert [j["id"] for j in jobs] == [got[0]]



def test_a_dead_job_is_not_replayed_over_a_live_holder_of_its_key(
    store: Store, t0: float
) -> None:
    first = enqueue_keyed(store, t0, max_retries=0)
    job = claim_one(store, "w1", t0 + 1)
    store.finish([failed(job, Outcome.FAILED, "boom", permanent=True)], now=t0 + 2)
    assert store.get_job(first)["status"] == JobStatus.DEAD
    second = enqueue_keyed(store, t0 + 3)
    assert second != first
    assert store.replay_dead([first], now=t0 + 4) == []  # the key holds: it stays dead
    assert store.get_job(first)["status"] == JobStatus.DEAD
    live = claim_one(store, "w1", t0 + 5)
    store.finish([succeeded(live, None)], now=t0 + 6)
    assert store.replay_dead([first], now=t0 + 7) == [first]  # the key is free again
