"""The database's bad days at the storage level (docs/design/database-bad-days.md, "A pause is
not a death" and "Infrastructure faults do not spend retries"): an observer judges silence only
while it has itself been in unbroken contact with the database, and an attempt its worker gave
up for want of the database is `interrupted`, not counted against `max_retries`."""

from __future__ import annotations

from heartq.lifecycle.crash import MAX_INTERRUPTIONS
from heartq.model import DetectedBy, JobStatus, Outcome, Renewal, WorkerInfo
from heartq.store import Store

from .support import claim_one, enqueue_one, worker

STALE = 9.0
"""Every worker here is stale after 9 s (3 heartbeats of 3 s); lease 6 s."""
LEASE = 6.0


def _register(store: Store, worker_id: str, now: float) -> None:
    info = WorkerInfo(
        id=worker_id,
        hostname="test-host",
        pid=4242,
        queues=("default",),
        concurrency=4,
        stale_after=STALE,
    )
    store.register_worker(info, now=now)


def _beat(store: Store, worker_id: str, now: float, *leases: Renewal) -> None:
    store.heartbeat(worker_id, list(leases), LEASE, now=now)


def _fleet_through_a_pause(store: Store, t0: float) -> tuple[str, Renewal]:
    """Workers `a` and `b` heartbeat every 3 s until t0 + 6; then the database pauses for
    20 s (nobody's heartbeat lands); at t0 + 26 `a`'s heartbeat lands first. `b` runs a
    job whose lease (6 s) ran out during the pause. Returns the job id and its renewal."""
    _register(store, "a", t0)
    _register(store, "b", t0)
    job_id = enqueue_one(store, t0)
    held = Renewal(claim_one(store, "b", t0, lease=LEASE).lease)
    for t in (3.0, 6.0):
        _beat(store, "a", t0 + t)
        _beat(store, "b", t0 + t, held)
    _beat(store, "a", t0 + 26)  # the first word from `a` after the pause
    return job_id, held


def test_after_a_pause_an_observer_judges_nobody_until_it_has_seen_a_full_threshold(
    store: Store, t0: float
) -> None:
    job_id, held = _fleet_through_a_pause(store, t0)

    # `b` is 20 s silent, but `a` could not have heard it: no verdict, no reaping.
    assert store.mark_stale_workers(STALE, DetectedBy.STALE_WORKER, now=t0 + 26, observer="a") == []
    assert store.reclaim_expired(DetectedBy.LEASE_EXPIRED, now=t0 + 26, observer="a") == []
    assert worker(store, "b")["status"] == "active"

    _beat(store, "b", t0 + 27, held)  # `b` was alive all along: its lease is renewed
    _beat(store, "a", t0 + 29)
    _beat(store, "a", t0 + 32)
    _beat(store, "a", t0 + 35)
    # A full threshold after `a`'s recovery: `b` is fresh, its lease valid.
    assert store.mark_stale_workers(STALE, DetectedBy.STALE_WORKER, now=t0 + 35, observer="a") == []
    assert store.get_job(job_id)["status"] == JobStatus.RUNNING

    # Real silence is still found once `a` has watched long enough to hear it.
    for t in (38.0, 41.0, 44.0, 47.0):
        _beat(store, "a", t0 + t)
    (stale,) = store.mark_stale_workers(STALE, DetectedBy.STALE_WORKER, now=t0 + 47, observer="a")
    assert stale.id == "b" and [r.job_id for r in stale.reclaimed] == [job_id]


def test_an_observer_cut_off_right_now_judges_nobody(store: Store, t0: float) -> None:
    """The observer's own monitor statement may land before its own heartbeat after a
    pause: its last heartbeat is then old, and it is blind."""
    job_id, _ = _fleet_through_a_pause(store, t0)
    now = t0 + 40  # `a` last heard of at t0 + 26: over half its threshold ago
    assert store.mark_stale_workers(STALE, DetectedBy.STALE_WORKER, now=now, observer="a") == []
    assert store.reclaim_expired(DetectedBy.LEASE_EXPIRED, now=now, observer="a") == []
    assert store.get_job(job_id)["status"] == JobStatus.RUNNING


def test_without_an_observer_the_verdict_is_immediate(store: Store, t0: float) -> None:
    """`heartq reclaim` is an operator's explicit act: it judges at once, as before."""
    job_id, _ = _fleet_through_a_pause(store, t0)
    (stale,) = store.mark_stale_workers(STALE, DetectedBy.STALE_WORKER, now=t0 + 26)
    assert stale.id == "b" and [r.job_id for r in stale.reclaimed] == [job_id]


def test_a_reaper_in_steady_contact_reaps_as_before(store: Store, t0: float) -> None:
    _register(store, "a", t0)
    _register(store, "b", t0)
    job_id = enqueue_one(store, t0)
    claim_one(store, "b", t0, lease=LEASE)
    for t in range(3, 19, 3):
        _beat(store, "a", t0 + t)  # `b` never renews its job
    (reaped,) = store.reclaim_expired(DetectedBy.LEASE_EXPIRED, now=t0 + 18, observer="a")
    assert reaped.job_id == job_id


def test_an_interrupted_attempt_is_not_counted_against_max_retries(store: Store, t0: float) -> None:
    _register(store, "w", t0)
    job_id = enqueue_one(store, t0, max_retries=0)
    job = claim_one(store, "w", t0, lease=LEASE)
    crash = {"reason": "its worker could not renew the lease in time and gave it up"}

    given_back = store.crash_attempt(job.lease, crash, DetectedBy.SELF_FENCE, now=t0 + 8)

    assert given_back is not None and given_back.status is JobStatus.QUEUED
    assert given_back.retry_delay == 0.0
    after = store.get_job(job_id)
    assert after["status"] == JobStatus.QUEUED and after["attempts"] == 0
    (execution,) = after["executions"]
    assert execution["outcome"] == Outcome.INTERRUPTED
    assert execution["crash"]["detected_by"] == "self_fence"
    assert execution["crash"]["worker_id"] == "w"
    again = claim_one(store, "w", t0 + 9, lease=LEASE)
    assert (again.attempt, again.execution_id) == (1, 2)


def test_a_crash_still_counts(store: Store, t0: float) -> None:
    """A poison pill that kills its worker is still stopped by max_retries."""
    _register(store, "w", t0)
    job_id = enqueue_one(store, t0, max_retries=0)
    job = claim_one(store, "w", t0, lease=LEASE)
    crashed = store.crash_attempt(job.lease, {"reason": "oom"}, DetectedBy.CHILD_EXIT, now=t0 + 1)
    assert crashed is not None and crashed.status is JobStatus.DEAD
    assert store.get_job(job_id)["executions"][0]["outcome"] == Outcome.CRASHED


def test_interruptions_are_bounded(store: Store, t0: float) -> None:
    _register(store, "w", t0)
    job_id = enqueue_one(store, t0, max_retries=0)
    crash = {"reason": "its worker could not renew the lease in time and gave it up"}
    t = t0
    for n in range(1, MAX_INTERRUPTIONS + 2):
        t += 1
        job = claim_one(store, "w", t, lease=LEASE)
        given_back = store.crash_attempt(job.lease, crash, DetectedBy.SELF_FENCE, now=t)
        assert given_back is not None
        expected = JobStatus.DEAD if n > MAX_INTERRUPTIONS else JobStatus.QUEUED
        assert given_back.status is expected, n
    dead = store.get_job(job_id)
    assert dead["status"] == JobStatus.DEAD
    assert dead["dead_reason"].startswith(f"interrupted {MAX_INTERRUPTIONS + 1} times")
    assert len(dead["executions"]) == MAX_INTERRUPTIONS + 1


def test_a_restarted_namesake_judges_silence_as_the_monitor_does(store: Store, t0: float) -> None:
    """Right after a database outage every worker is silent, the one starting too: a
    twin started then under a live worker's name must not take its jobs for its silence
    (the chaos runs: a twin's reconciliation 2.6 s after a PostgreSQL restart took four
    jobs from a live worker whose heartbeats the restart had held up). Silence counts
    once the starting worker has been in contact for the namesake's threshold."""
    info = WorkerInfo(id="steady", hostname="test-host", pid=1, queues=("default",),
                      concurrency=4, name="host-a", stale_after=STALE)  # fmt: skip
    store.register_worker(info, now=t0)
    enqueue_one(store, t0)
    held = Renewal(claim_one(store, "steady", t0, lease=60).lease)
    handle = store.link.liveness_hold("steady")  # alive: its lock held all along
    try:
        twin = WorkerInfo(id="twin", hostname="test-host", pid=2, queues=("default",),
                          concurrency=4, name="host-a", stale_after=STALE)  # fmt: skip
        store.register_worker(twin, now=t0 + 20)  # `steady` is 20 s silent: the outage
        done = store.reclaim_by_name("host-a", "twin", DetectedBy.RECONCILIATION, now=t0 + 20)
        assert done.reclaimed == [] and [n.id for n in done.alive] == ["steady"]
        assert store.get_job(held.lease.job_id)["status"] == JobStatus.RUNNING

        for t in (23.0, 26.0, 29.0):  # the twin in contact for its threshold; `steady` silent
            _beat(store, "twin", t0 + t)
        done = store.reclaim_by_name("host-a", "twin", DetectedBy.RECONCILIATION, now=t0 + 29)
        assert [r.job_id for r in done.reclaimed] == [held.lease.job_id]
    finally:
        handle.close()
