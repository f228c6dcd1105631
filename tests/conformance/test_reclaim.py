"""Reclaiming: expired leases, dead and stale workers, restarted names, crashed children;
and pruning of what is old."""

from __future__ import annotations

import math

import pytest

from heartq import events
from heartq.errors import ConfigError
from heartq.event_stream import EventStream
from heartq.lifecycle.fate import cancelled, succeeded
from heartq.maintenance.reconcile import reconcile
from heartq.model import (
    DetectedBy,
    JobStatus,
    Outcome,
    Reclaimed,
    Reconciliation,
    Renewal,
    RenewStatus,
    WorkerInfo,
)
from heartq.store import Store, open_store
from tests.support import wait_for

from .support import (
    CRASH_KEYS,
    LEASE,
    at,
    claim_one,
    enqueue_one,
    insert_version_1_job,
    needs_liveness_locks,
    register,
    worker,
)


def _crashed(store: Store, job_id: str) -> dict:
    """The crash context of the job's last execution, checked to be a crash."""
    execution = store.get_job(job_id)["executions"][-1]
    assert execution["outcome"] == Outcome.CRASHED
    assert execution["ended_at"] is not None
    assert execution["error"]
    crash = execution["crash"]
    assert set(crash) >= CRASH_KEYS, crash
    return crash


def test_reap_reclaims_an_expired_lease_with_its_crash_context(store: Store, t0: float) -> None:
    register(store, "w1", t0)
    job_id = enqueue_one(store, t0, task="analyze")
    job = claim_one(store, "w1", t0)
    store.heartbeat("w1", [Renewal(job.lease)], LEASE, now=t0 + 10)

    assert store.reclaim_expired(DetectedBy.LEASE_EXPIRED, now=t0 + 10 + LEASE - 1) == []
    (reclaimed,) = store.reclaim_expired(DetectedBy.LEASE_EXPIRED, now=t0 + 10 + LEASE + 1)

    assert isinstance(reclaimed, Reclaimed)
    assert reclaimed.job_id == job_id
    assert reclaimed.execution_id == 1
    assert reclaimed.worker_id == "w1"
    assert reclaimed.task == "analyze"
    assert reclaimed.status == JobStatus.QUEUED
    assert reclaimed.attempts == 1
    assert reclaimed.dead_reason is None
    crash = _crashed(store, job_id)
    assert crash == reclaimed.crash
    assert crash["worker_id"] == "w1"
    assert at(crash["last_heartbeat_at"], t0 + 10)
    assert at(crash["detected_at"], t0 + 10 + LEASE + 1)
    assert crash["detected_by"] == "lease_expired"
    assert crash["reason"] == "lease expired"

    after = store.get_job(job_id)
    assert after["status"] == JobStatus.QUEUED
    assert after["attempts"] == 1  # the crashed attempt counts
    assert after["worker_id"] is None
    assert after["lease_expires_at"] is None
    # a first crash: back in the queue at once, in its place in line (its run_at kept)
    assert reclaimed.retry_delay == 0.0
    assert at(after["run_at"], t0)
    retry = claim_one(store, "w2", t0 + 10 + LEASE + 1)
    assert (retry.id, retry.attempt, retry.execution_id) == (job_id, 2, 2)


def test_a_reclaimed_job_keeps_its_place_ahead_of_newer_jobs(store: Store, t0: float) -> None:
    """A job taken back from a gone worker runs before the jobs enqueued after it."""
    first = enqueue_one(store, t0)
    claim_one(store, "w1", t0, lease=10)
    newer = [enqueue_one(store, t0 + 1 + i) for i in range(3)]
    (reclaimed,) = store.reclaim_expired(DetectedBy.LEASE_EXPIRED, now=t0 + 20)
    assert reclaimed.job_id == first
    claimed = store.claim("w2", ["default"], 4, LEASE, now=t0 + 20)
    assert [j.id for j in claimed] == [first, *newer]


def test_from_the_second_crash_a_reclaimed_job_waits_its_backoff(store: Store, t0: float) -> None:
    """A job that keeps killing its workers is slowed down, then stopped by max_retries."""
    job_id = enqueue_one(store, t0)  # retry_backoff 5 s by default
    claim_one(store, "w1", t0, lease=10)
    (first,) = store.reclaim_expired(DetectedBy.LEASE_EXPIRED, now=t0 + 20)
    assert first.retry_delay == 0.0
    claim_one(store, "w2", t0 + 20, lease=10)
    (second,) = store.reclaim_expired(DetectedBy.LEASE_EXPIRED, now=t0 + 40)
    assert second.status == JobStatus.QUEUED
    # the backoff of a second failed attempt: 10 s, +/- 25 % jitter
    assert 7.5 <= second.retry_delay <= 12.5
    assert at(store.get_job(job_id)["run_at"], t0 + 40 + second.retry_delay)
    assert store.claim("w3", ["default"], 1, LEASE, now=t0 + 40 + 7.4) == []


def test_reap_leaves_unexpired_and_other_jobs_alone(store: Store, t0: float) -> None:
    short = enqueue_one(store, t0)
    claim_one(store, "w1", t0, lease=10)
    long = enqueue_one(store, t0)
    claim_one(store, "w1", t0, lease=100)
    done = enqueue_one(store, t0)
    store.finish([succeeded(claim_one(store, "w1", t0), None)], now=t0)
    queued = enqueue_one(store, t0)
    reclaimed = store.reclaim_expired(DetectedBy.LEASE_EXPIRED, now=t0 + 50)
    assert [r.job_id for r in reclaimed] == [short]
    assert store.get_job(long)["status"] == JobStatus.RUNNING
    assert store.get_job(queued)["status"] == JobStatus.QUEUED
    assert store.get_job(done)["status"] == JobStatus.SUCCEEDED
    assert store.reclaim_expired(DetectedBy.LEASE_EXPIRED, now=t0 + 50) == []


def test_a_job_that_crashes_every_worker_goes_dead(store: Store, t0: float) -> None:
    job_id = enqueue_one(store, t0, max_retries=3, retry_backoff=0.0)
    now = t0
    for n in range(1, 5):
        job = claim_one(store, f"w{n}", now)
        assert job.attempt == n
        now += LEASE + 1
        (reclaimed,) = store.reclaim_expired(DetectedBy.LEASE_EXPIRED, now=now)
        assert reclaimed.attempts == n
        if n < 4:
            assert reclaimed.status == JobStatus.QUEUED
            assert store.get_job(job_id)["status"] == JobStatus.QUEUED
    assert reclaimed.status == JobStatus.DEAD
    after = store.get_job(job_id)
    assert after["status"] == JobStatus.DEAD
    assert after["attempts"] == 4
    assert at(after["finished_at"], now)
    assert after["dead_reason"] == reclaimed.dead_reason
    assert "crashed 4 workers" in after["dead_reason"], after["dead_reason"]
    assert [e["outcome"] for e in after["executions"]] == ["crashed"] * 4
    assert [e["crash"]["worker_id"] for e in after["executions"]] == ["w1", "w2", "w3", "w4"]
    assert store.claim("w5", ["default"], 1, LEASE, now=now + 10_000) == []


def test_reap_respects_its_batch_limit(store: Store, t0: float) -> None:
    for _ in range(5):
        enqueue_one(store, t0)
    store.claim("w1", ["default"], 5, 10, now=t0)
    later = t0 + 11
    expired = DetectedBy.LEASE_EXPIRED
    sizes = [len(store.reclaim_expired(expired, limit=2, now=later)) for _ in "abcd"]
    assert sizes == [2, 2, 1, 0]
    assert all(j["status"] == JobStatus.QUEUED for j in store.list_jobs())


def test_reclaim_worker_takes_back_all_its_jobs_at_once(store: Store, t0: float) -> None:
    register(store, "dead", t0)
    register(store, "alive", t0)
    for _ in range(3):
        enqueue_one(store, t0)
    mine = store.claim("dead", ["default"], 2, 600, now=t0)
    (theirs,) = store.claim("alive", ["default"], 1, 600, now=t0)

    reclaimed = store.reclaim_worker(
        "dead", DetectedBy.LIVENESS_LOCK, "worker process gone", now=t0 + 1
    )

    assert {r.job_id for r in reclaimed} == {j.id for j in mine}
    for job in mine:
        crash = _crashed(store, job.id)
        assert crash["worker_id"] == "dead"
        assert crash["detected_by"] == "liveness_lock"
        assert crash["reason"] == "worker process gone"
        assert at(crash["detected_at"], t0 + 1)
        assert store.get_job(job.id)["status"] == JobStatus.QUEUED
    assert store.get_job(theirs.id)["status"] == JobStatus.RUNNING
    assert worker(store, "dead")["status"] == "inactive"
    assert worker(store, "alive")["status"] == "active"
    assert store.reclaim_worker("dead", DetectedBy.LIVENESS_LOCK, "again", now=t0 + 2) == []


def judged(store: Store, name: str, new: str, at: float) -> Reconciliation:
    """Reconcile at `at` and, for the namesakes whose free lock the store does not believe
    yet (its `liveness_grace`), again once the grace has passed: what a worker's startup
    and its `PendingReconciliation` do together. One call where a free lock is a dead
    process (SQLite)."""
    done = store.reclaim_by_name(name, new, DetectedBy.RECONCILIATION, now=at)
    if not done.suspected:
        return done
    assert store.liveness_grace > 0, "only a store with a grace suspects"
    assert done.reclaimed == []  # nothing taken on a suspicion
    later = store.reclaim_by_name(
        name, new, DetectedBy.RECONCILIATION, now=at + store.liveness_grace
    )
    assert later.suspected == []
    return later


def test_reclaim_by_name_recovers_what_an_earlier_incarnation_held(store: Store, t0: float) -> None:
    needs_liveness_locks(store)
    register(store, "pod-1-old", t0, name="pod-1")
    register(store, "pod-2", t0, name="pod-2")
    for _ in range(3):
        enqueue_one(store, t0)
    old_jobs = store.claim("pod-1-old", ["default"], 2, 600, now=t0)
    (other,) = store.claim("pod-2", ["default"], 1, 600, now=t0)

    register(store, "pod-1-new", t0 + 5, name="pod-1")  # the pod restarted
    reclaimed = judged(store, "pod-1", "pod-1-new", t0 + 5).reclaimed

    assert {r.job_id for r in reclaimed} == {j.id for j in old_jobs}
    for job in old_jobs:
        crash = _crashed(store, job.id)
        assert crash["worker_id"] == "pod-1-old"
        assert crash["detected_by"] == "reconciliation"
        assert "pod-1" in crash["reason"]
        assert store.get_job(job.id)["status"] == JobStatus.QUEUED
    assert store.get_job(other.id)["status"] == JobStatus.RUNNING
    assert worker(store, "pod-1-old")["status"] == "inactive"
    assert worker(store, "pod-1-new")["status"] == "active"
    assert worker(store, "pod-2")["status"] == "active"
    # the new incarnation's own jobs are never taken by its own reconciliation
    enqueue_one(store, t0 + 6)
    claim_one(store, "pod-1-new", t0 + 6, lease=600)
    assert store.reclaim_by_name("pod-1", "pod-1-new", "reconciliation", now=t0 + 7).reclaimed == []


def test_crash_attempt_closes_one_attempt_at_once(store: Store, t0: float) -> None:
    job_id = enqueue_one(store, t0)
    job = claim_one(store, "w1", t0, lease=600)
    crash = {"reason": "child process killed by SIGKILL", "exit_code": -9, "signal": "SIGKILL"}
    reclaimed = store.crash_attempt(job.lease, crash, DetectedBy.CHILD_EXIT, now=t0 + 2)

    assert reclaimed is not None
    assert reclaimed.job_id == job_id
    assert reclaimed.status == JobStatus.QUEUED
    stored = _crashed(store, job_id)
    assert stored["reason"] == "child process killed by SIGKILL"
    assert stored["exit_code"] == -9
    assert stored["signal"] == "SIGKILL"
    assert stored["detected_by"] == "child_exit"
    assert stored["worker_id"] == "w1"
    assert store.get_job(job_id)["status"] == JobStatus.QUEUED
    # a second report of the same crash finds nothing to do
    assert store.crash_attempt(job.lease, crash, DetectedBy.CHILD_EXIT, now=t0 + 3) is None
    assert len(store.get_job(job_id)["executions"]) == 1


def test_crash_attempt_of_the_last_attempt_buries_the_job(store: Store, t0: float) -> None:
    job_id = enqueue_one(store, t0, max_retries=0)
    job = claim_one(store, "w1", t0)
    reclaimed = store.crash_attempt(job.lease, {"reason": "segfault"}, "child_exit", now=t0 + 1)
    assert reclaimed is not None and reclaimed.status == JobStatus.DEAD
    after = store.get_job(job_id)
    assert after["status"] == JobStatus.DEAD
    assert after["dead_reason"] and "crashed 1 worker in 1 attempt" in after["dead_reason"]


def test_mark_stale_workers(store: Store, t0: float) -> None:
    register(store, "silent", t0, name="pod-a")
    register(store, "chatty", t0)
    enqueue_one(store, t0)
    enqueue_one(store, t0)
    silent_job = claim_one(store, "silent", t0, lease=1000)
    chatty_job = claim_one(store, "chatty", t0, lease=1000)
    store.heartbeat("chatty", [Renewal(chatty_job.lease)], 1000, now=t0 + 50)

    assert store.mark_stale_workers(90, DetectedBy.STALE_WORKER, now=t0 + 80) == []
    (stale,) = store.mark_stale_workers(90, DetectedBy.STALE_WORKER, now=t0 + 100)

    assert stale.id == "silent"
    assert stale.name == "pod-a"
    assert stale.heartbeat_age == pytest.approx(100)
    (reclaimed,) = stale.reclaimed
    assert reclaimed.job_id == silent_job.id
    crash = _crashed(store, silent_job.id)
    assert crash["detected_by"] == "stale_worker"
    assert crash["worker_id"] == "silent"
    assert at(crash["last_heartbeat_at"], t0)
    assert "100" in crash["reason"]  # says how long it was silent
    assert store.get_job(silent_job.id)["status"] == JobStatus.QUEUED
    assert store.get_job(chatty_job.id)["status"] == JobStatus.RUNNING  # lease not expired
    assert worker(store, "silent")["status"] == "inactive"
    assert worker(store, "chatty")["status"] == "active"
    # once inactive, a worker is not reported again
    later = store.mark_stale_workers(90, DetectedBy.STALE_WORKER, now=t0 + 1000)
    assert [s.id for s in later] == ["chatty"]


def test_stop_worker(store: Store, t0: float) -> None:
    register(store, "w1", t0)
    store.stop_worker("w1", now=t0 + 1)
    assert worker(store, "w1")["status"] == "stopped"
    assert [w["id"] for w in store.list_workers()] == []
    assert store.mark_stale_workers(1, "stale_worker", now=t0 + 1000) == []


def test_prune_old_workers_and_finished_jobs_but_never_dead_ones(store: Store, t0: float) -> None:
    day = 86400.0
    for wid in ("old-stopped", "old-inactive", "new-stopped", "active"):
        register(store, wid, t0)
    store.stop_worker("old-stopped", now=t0)
    store.reclaim_worker("old-inactive", "liveness_lock", "gone", now=t0)
    store.stop_worker("new-stopped", now=t0 + 6 * day)

    def finished(status: JobStatus, at_time: float) -> str:
        job_id = enqueue_one(store, at_time, max_retries=0)
        job = claim_one(store, "active", at_time)
        if status == JobStatus.SUCCEEDED:
            store.finish([succeeded(job, None)], now=at_time)
        elif status == JobStatus.CANCELLED:
            store.cancel_job(job_id, now=at_time)
            store.finish([cancelled(job)], now=at_time)
        else:
            store.crash_attempt(job.lease, {"reason": "boom"}, "child_exit", now=at_time)
        return job_id

    old_ok = finished(JobStatus.SUCCEEDED, t0)
    old_cancelled = finished(JobStatus.CANCELLED, t0)
    old_dead = finished(JobStatus.DEAD, t0)
    new_ok = finished(JobStatus.SUCCEEDED, t0 + 6 * day)
    old_queued = enqueue_one(store, t0, delay=30 * day)
    store.heartbeat("active", [], LEASE, now=t0 + 8 * day)

    counts = store.prune(7 * day, 7 * day, now=t0 + 8 * day)

    assert (counts.workers, counts.jobs) == (2, 2)
    assert {w["id"] for w in store.list_workers(include_all=True)} == {"new-stopped", "active"}
    remaining = {j["id"] for j in store.list_jobs(limit=1000)}
    assert remaining == {old_dead, new_ok, old_queued}
    assert old_ok not in remaining and old_cancelled not in remaining
    assert store.get_job(old_dead)["executions"]  # the dead keep their history
    assert store.prune(7 * day, 7 * day, now=t0 + 8 * day).jobs == 0


# -- each worker is judged stale by its own settings ----------------------------------------


def _register_with(store: Store, worker_id: str, now: float, stale_after: float | None) -> None:
    store.register_worker(
        WorkerInfo(
            id=worker_id,
            hostname="test-host",
            pid=4242,
            queues=("default",),
            concurrency=1,
            stale_after=stale_after,
        ),
        now=now,
    )


def test_each_worker_is_judged_stale_by_its_own_stale_after(store: Store, t0: float) -> None:
    """A worker that heartbeats slowly (stale after 300 s) is not stale to a peer whose
    own threshold is 90 s; the peer's threshold only applies to workers that recorded
    none. Otherwise the slow worker's jobs are reclaimed while it runs them: twice run."""
    _register_with(store, "slow", t0, 300.0)
    _register_with(store, "quick", t0, 10.0)
    _register_with(store, "unknown", t0, None)
    enqueue_one(store, t0)
    slow_job = claim_one(store, "slow", t0, lease=1000)

    stale = store.mark_stale_workers(90, DetectedBy.STALE_WORKER, now=t0 + 100)
    assert sorted(s.id for s in stale) == ["quick", "unknown"]
    assert worker(store, "slow")["status"] == "active"
    assert store.get_job(slow_job.id)["status"] == JobStatus.RUNNING

    store.heartbeat("slow", [Renewal(slow_job.lease)], 1000, now=t0 + 250)
    assert store.mark_stale_workers(90, DetectedBy.STALE_WORKER, now=t0 + 500) == []
    (late,) = store.mark_stale_workers(90, DetectedBy.STALE_WORKER, now=t0 + 551)
    assert late.id == "slow"
    assert [r.job_id for r in late.reclaimed] == [slow_job.id]
    assert "301" in _crashed(store, slow_job.id)["reason"]


def test_a_short_own_stale_after_wins_over_a_longer_observer(store: Store, t0: float) -> None:
    _register_with(store, "quick", t0, 5.0)
    assert store.mark_stale_workers(3600, DetectedBy.STALE_WORKER, now=t0 + 4) == []
    (stale,) = store.mark_stale_workers(3600, DetectedBy.STALE_WORKER, now=t0 + 6)
    assert stale.id == "quick"


def test_registering_again_records_the_new_stale_after(store: Store, t0: float) -> None:
    _register_with(store, "w1", t0, 300.0)
    _register_with(store, "w1", t0, 20.0)
    (stale,) = store.mark_stale_workers(1000, DetectedBy.STALE_WORKER, now=t0 + 21)
    assert stale.id == "w1"


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_register_refuses_a_stale_after_that_is_not_a_duration(
    store: Store, t0: float, bad: float
) -> None:
    with pytest.raises(ConfigError, match="stale_after"):
        _register_with(store, "w1", t0, bad)
    assert store.list_workers(include_all=True) == []


def test_upgrade_from_schema_1_adds_stale_after(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 2 upgrades a database of version 1 that already holds jobs, once."""
    older = open_store(store_url)
    dialect = type(older.dialect)  # type: ignore[attr-defined]
    every = older.dialect.migrations()
    monkeypatch.setattr(dialect, "migrations", lambda self: every[:1])
    try:
        assert older.link.migrate() == 1
        t0 = float(math.floor(older.clock()))
        job_id = insert_version_1_job(older, t0)
    finally:
        older.link.close()
    monkeypatch.setattr(dialect, "migrations", lambda self: every)
    newer = open_store(store_url)
    try:
        assert newer.link.migrate() == every[-1][0] >= 2
        assert newer.link.migrate() == every[-1][0]  # again: nothing to do
        _register_with(newer, "w1", t0, 300.0)
        assert claim_one(newer, "w1", t0).id == job_id
        assert newer.mark_stale_workers(90, DetectedBy.STALE_WORKER, now=t0 + 100) == []
    finally:
        newer.link.close()


# -- reconciliation leaves a live namesake alone --------------------------------------------


def test_reclaim_by_name_leaves_a_live_namesake_its_jobs(store: Store, t0: float) -> None:
    """Two processes on one host both started with `--name <hostname>`: the second's
    reconciliation must not take the jobs of the first, which is alive (it holds its
    liveness lock). A namesake without a lock is gone and loses its jobs."""
    needs_liveness_locks(store)
    seen: list[tuple[str, dict]] = []
    stream = EventStream()

    @stream.subscribe
    def listen(event: events.Event) -> None:
        seen.append((event.name, event.fields))

    register(store, "live", t0, name="host-a")
    register(store, "gone", t0, name="host-a")
    for _ in range(4):
        enqueue_one(store, t0)
    live_jobs = store.claim("live", ["default"], 2, 600, now=t0)
    gone_jobs = store.claim("gone", ["default"], 2, 600, now=t0)
    handle = store.link.liveness_hold("live")
    try:
        register(store, "new", t0 + 5, name="host-a")
        first = reconcile(store, "host-a", "new", stream, now=t0 + 5)
        reclaimed = first.reclaimed or judged(store, "host-a", "new", t0 + 5).reclaimed

        assert sorted(r.job_id for r in reclaimed) == sorted(j.id for j in gone_jobs)
        for job in live_jobs:
            after = store.get_job(job.id)
            assert (after["status"], after["worker_id"]) == (JobStatus.RUNNING, "live")
            assert store.heartbeat("live", [Renewal(job.lease)], 600, now=t0 + 6) == {
                job.lease: RenewStatus.RENEWED
            }
        for job in gone_jobs:
            assert store.get_job(job.id)["status"] == JobStatus.QUEUED
        assert worker(store, "live")["status"] == "active"
        assert worker(store, "gone")["status"] == "inactive"
        alive = [f for e, f in seen if e == "namesake_alive"]
        assert [f["namesake_id"] for f in alive] == ["live"]
        assert alive[0]["name"] == "host-a"
        # and again: still nothing taken from the live one
        assert store.reclaim_by_name("host-a", "new", "reconciliation", now=t0 + 9).reclaimed == []
    finally:
        handle.close()
    # once its process is gone (lock released), the next reconciliation takes them. The
    # release closes the lock's session when nothing else uses it, and the server frees
    # the lock when that backend has exited, moments later (longer on a loaded machine):
    # until then the namesake still looks alive, and nothing is taken.
    later: list[Reclaimed] = []

    def taken() -> bool:
        later[:] = judged(store, "host-a", "new", t0 + 10).reclaimed
        return bool(later)

    wait_for(taken, 15, "the released liveness lock to be seen free")
    assert sorted(r.job_id for r in later) == sorted(j.id for j in live_jobs)
    assert worker(store, "live")["status"] == "inactive"


def test_reclaim_by_name_takes_a_namesake_silent_past_its_stale_after(
    store: Store, t0: float
) -> None:
    """A namesake that holds its lock but has not heartbeat for longer than its own
    threshold (frozen, partitioned) is reclaimed, as the stale monitor would. Its worker's
    id is its own: liveness locks are keyed by worker id in every schema of a database,
    and the next test holds "frozen" in its own, maybe at the same time on another test
    process (a clean-clone run beside a CPU burner failed on the shared id)."""
    store.register_worker(
        WorkerInfo(
            id="silent",
            hostname="test-host",
            pid=1,
            queues=("default",),
            concurrency=1,
            name="host-a",
            stale_after=30.0,
        ),
        now=t0,
    )
    enqueue_one(store, t0)
    job = claim_one(store, "silent", t0, lease=600)
    handle = store.link.liveness_hold("silent")
    try:
        assert store.reclaim_by_name("host-a", "new", "reconciliation", now=t0 + 29).reclaimed == []
        (reclaimed,) = store.reclaim_by_name(
            "host-a", "new", "reconciliation", now=t0 + 31
        ).reclaimed
        assert reclaimed.job_id == job.id
        assert worker(store, "silent")["status"] == "inactive"
    finally:
        handle.close()


def test_reclaim_by_name_falls_back_to_the_given_stale_after(store: Store, t0: float) -> None:
    register(store, "frozen", t0, name="host-a")  # recorded no threshold of its own
    enqueue_one(store, t0)
    job = claim_one(store, "frozen", t0, lease=600)
    handle = store.link.liveness_hold("frozen")
    try:
        assert (
            store.reclaim_by_name("host-a", "new", "reconciliation", now=t0 + 500).reclaimed == []
        )
        assert (
            store.reclaim_by_name(
                "host-a", "new", "reconciliation", now=t0 + 50, stale_after=90
            ).reclaimed
            == []
        )
        (reclaimed,) = store.reclaim_by_name(
            "host-a", "new", "reconciliation", now=t0 + 100, stale_after=90
        ).reclaimed
        assert reclaimed.job_id == job.id
    finally:
        handle.close()


def test_reclaim_by_name_waits_out_a_lock_down_for_less_than_the_grace(
    store: Store, t0: float
) -> None:
    """A live worker whose liveness lock is down for a moment (PostgreSQL: its session
    was terminated or the server restarted; it takes the lock again within about a
    second) keeps its jobs when a twin with its name starts in that moment: the twin
    suspects it, and finds its lock held again when it judges once more, after the
    grace. (The chaos runs' finding 6: reconciliation believed a free lock at once.)
    Where a free lock is a gone process (SQLite's lock files), there is no moment.
    Its worker's name is its own: liveness locks are keyed by worker id in every schema
    of a database, and other tests hold "live" in theirs meanwhile."""
    needs_liveness_locks(store)
    register(store, "blinking", t0, name="host-a")
    enqueue_one(store, t0)
    job = claim_one(store, "blinking", t0, lease=600)
    register(store, "twin", t0 + 5, name="host-a")
    first = store.reclaim_by_name("host-a", "twin", DetectedBy.RECONCILIATION, now=t0 + 5)
    if store.liveness_grace == 0:  # a free lock file: gone, taken at once
        assert [r.job_id for r in first.reclaimed] == [job.id]
        return
    assert (first.reclaimed, first.suspected) == ([], ["blinking"])
    handle = store.link.liveness_hold("blinking")  # its lock is back
    try:
        later = store.reclaim_by_name(
            "host-a", "twin", DetectedBy.RECONCILIATION, now=t0 + 5 + store.liveness_grace
        )
        assert later.reclaimed == [] and later.suspected == []
        assert [n.id for n in later.alive] == ["blinking"]
        assert store.get_job(job.id)["status"] == JobStatus.RUNNING
        assert worker(store, "blinking")["status"] == "active"
    finally:
        handle.close()
