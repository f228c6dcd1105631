"""A worker process that dies or freezes mid-job: its job is found, reclaimed and finished
elsewhere, with the story kept in the executions (docs/design/protocol.md steps 5, 7, 9, 11, 12;
I1-I4)."""

from __future__ import annotations

import signal
import time

import pytest

from heartq.store.postgres.advisory_locks import LIVENESS_GRACE
from tests.conftest import on_every_backend

from .conftest import RECONCILIATION_ONLY, STEADY, Harness, WorkerProc, parse_ts

pytestmark = pytest.mark.slow

LEASE = 0.6
RECLAIM_INTERVAL = 0.3
SLACK = 1.5
"""Scheduling slack on a loaded 2-core machine, on top of a protocol bound."""


def two_workers(harness: Harness) -> tuple[WorkerProc, WorkerProc]:
    return harness.start_worker(), harness.start_worker()


def owner_and_other(
    harness: Harness, job: dict, workers: tuple[WorkerProc, WorkerProc]
) -> tuple[WorkerProc, WorkerProc]:
    owner = harness.by_id(job["worker_id"])
    other = workers[1] if owner is workers[0] else workers[0]
    return owner, other


@on_every_backend  # a gone process's liveness lock: advisory, or a lock file
def test_sigkill_mid_job_is_reclaimed_and_finished_by_another_worker(harness: Harness) -> None:
    workers = two_workers(harness)
    job_id = harness.enqueue("hold_first", {"seconds": 60})
    harness.wait_for(lambda: harness.started_file(job_id, 1).exists(), 10, "attempt 1 to start")
    owner, other = owner_and_other(harness, harness.job(job_id), workers)

    killed_at = owner.kill()

    done = harness.wait_status(job_id, "succeeded", LEASE + RECLAIM_INTERVAL + 10)
    first, second = done["executions"]
    assert first["outcome"] == "crashed"
    assert first["worker_id"] == owner.id
    crash = first["crash"]
    assert crash["worker_id"] == owner.id
    assert crash["last_heartbeat_at"] is not None
    assert crash["detected_by"] in ("liveness_lock", "lease_expired", "stale_worker")
    # I1: the job left `running` within lease + reclaim interval of the death.
    detected_after = parse_ts(crash["detected_at"]) - killed_at
    assert detected_after <= LEASE + RECLAIM_INTERVAL + SLACK, detected_after

    assert second["outcome"] == "succeeded"
    assert second["worker_id"] == other.id
    assert done["result"]["worker_id"] == other.id
    assert done["result"]["execution_id"] == second["execution_id"] > first["execution_id"]
    assert done["attempts"] == 2
    assert other.alive()


@on_every_backend  # a frozen process still holds its liveness lock: advisory, or a lock file
def test_sigstopped_worker_is_fenced_out_and_its_late_completion_lands_nothing(
    harness: Harness,
) -> None:
    # STEADY's 4 s lease: with FAST's 0.6 s, a heartbeat starved half a second by a loaded
    # machine before the freeze made the worker fence itself first (the attempt ended
    # `interrupted`, by its own hand, not taken from a frozen worker: seen once in a full
    # run on a clean clone), and the freeze then tested nothing.
    workers = harness.start_worker(settings=STEADY), harness.start_worker(settings=STEADY)
    # Attempt 1 runs 1 s then returns: by the time its worker is continued, the time has
    # passed, so the stale attempt tries to complete.
    job_id = harness.enqueue("hold_first", {"seconds": 1.0})
    harness.wait_for(lambda: harness.started_file(job_id, 1).exists(), 10, "attempt 1 to start")
    stale, other = owner_and_other(harness, harness.job(job_id), workers)
    harness.freeze(stale)
    try:
        # A stopped process still holds its liveness lock: only its lease (or its silence
        # in the registry) can give the job away.
        done = harness.wait_status(job_id, "succeeded", 15)
        assert stale.alive()
    finally:
        stale.signal(signal.SIGCONT)
    first, second = done["executions"]
    assert first["worker_id"] == stale.id and first["outcome"] == "crashed"
    assert first["crash"]["detected_by"] in ("lease_expired", "stale_worker")
    assert second["worker_id"] == other.id and second["outcome"] == "succeeded"

    # The continued worker finds out it lost the job and reports nothing of it.
    harness.wait_for(
        lambda: stale.job_events("lease_lost", job_id), 10, "the stale worker's lease_lost"
    )
    stale.signal(signal.SIGTERM)  # after it exits, nothing more of it can land
    assert stale.wait_exit(15) == 0
    assert not stale.job_events("job_succeeded", job_id)
    assert not stale.job_events("job_failed", job_id)

    final = harness.job(job_id)
    assert final["status"] == "succeeded"
    assert final["result"] == done["result"]
    assert final["result"]["worker_id"] == other.id
    assert final["result"]["execution_id"] == second["execution_id"]
    assert [e["outcome"] for e in final["executions"]] == ["crashed", "succeeded"]
    assert final["executions"][0]["ended_at"] == first["ended_at"]
    assert final["finished_at"] == done["finished_at"]


def test_checkpoint_of_a_killed_attempt_is_handed_to_the_next(harness: Harness) -> None:
    workers = two_workers(harness)
    job_id = harness.enqueue("checkpointed")
    harness.wait_for(
        lambda: harness.path(f"checkpointed-{job_id}").exists(), 10, "the checkpoint save"
    )
    # the worker's pulse stores it within about a pulse interval (0.2 s here)
    harness.wait_for(
        lambda: harness.job(job_id)["checkpoint"] == {"step": 3}, 10, "the pulse's write"
    )
    owner, other = owner_and_other(harness, harness.job(job_id), workers)
    owner.kill()

    done = harness.wait_status(job_id, "succeeded", 15)
    assert done["result"]["checkpoint"] == {"step": 3}
    assert done["result"]["attempt"] == 2
    assert done["result"]["worker_id"] == other.id
    assert [e["outcome"] for e in done["executions"]] == ["crashed", "succeeded"]


def test_job_that_kills_every_worker_goes_dead_after_max_retries(harness: Harness) -> None:
    job_id = harness.enqueue("kill_worker", max_retries=2)
    current = harness.start_worker(wait=False)
    deaths = 0
    deadline = time.monotonic() + 60
    # The supervisor: restart a worker whenever one dies, until the job is dead.
    while harness.job(job_id)["status"] != "dead":
        assert time.monotonic() < deadline, harness._diagnostics(lambda: harness.job(job_id))
        if not current.alive():
            deaths += 1
            assert deaths <= 3, "the job ran more than max_retries + 1 times"
            current = harness.start_worker(wait=False)
        time.sleep(0.02)
    final_worker = current  # started after the third crash (or about to start)
    harness.wait_started(final_worker)

    dead = harness.job(job_id)
    executions = dead["executions"]
    assert [e["outcome"] for e in executions] == ["crashed"] * 3
    assert len({e["worker_id"] for e in executions}) == 3
    assert dead["attempts"] == 3
    assert "crashed 3 workers" in dead["dead_reason"], dead["dead_reason"]

    # The final worker is not fed the poison job again: it lives and runs other work.
    probe = harness.enqueue("quick")
    done = harness.wait_status(probe, "succeeded", 10)
    assert done["result"]["worker_id"] == final_worker.id
    assert final_worker.alive()
    after = harness.job(job_id)
    assert after["status"] == "dead" and after["attempts"] == 3
    assert len(after["executions"]) == 3
    assert not harness.started_file(job_id, 4).exists()


@on_every_backend  # at once on SQLite, after the grace on PostgreSQL
def test_restart_under_the_same_name_reclaims_at_once(harness: Harness) -> None:
    """A worker restarted under its name takes back what its dead incarnation held,
    without waiting for a lease or a probe: at once on SQLite (a free lock file is a
    gone process), once its lock has stayed free for the grace on PostgreSQL (a free
    session lock may be a dropped session under a live worker, finding 6)."""
    first = harness.start_worker("--name", "pod-1", settings=RECONCILIATION_ONLY)
    job_id = harness.enqueue("hold_first", {"seconds": 120})
    harness.wait_for(lambda: harness.started_file(job_id, 1).exists(), 10, "attempt 1 to start")
    lease_expires_at = parse_ts(harness.job(job_id)["lease_expires_at"])
    killed_at = first.kill()

    second = harness.start_worker("--name", "pod-1", settings=RECONCILIATION_ONLY)
    done = harness.wait_status(job_id, "succeeded", 10)
    assert time.time() < lease_expires_at - 10  # far before the lease would have expired

    crashed, succeeded = done["executions"]
    assert crashed["outcome"] == "crashed"
    assert crashed["crash"]["detected_by"] == "reconciliation"
    assert crashed["crash"]["worker_id"] == first.id
    assert parse_ts(crashed["crash"]["detected_at"]) - killed_at < 10
    assert succeeded["worker_id"] == second.id
    reconciled = second.events("reconciliation_complete")
    assert reconciled and reconciled[-1]["reclaimed"] == 1
    assert reconciled[-1]["job_ids"] == [job_id]
    if harness.backend == "postgres":  # suspected at startup, judged after the grace
        assert (reconciled[0]["reclaimed"], reconciled[0]["suspected"]) == (0, [first.id])
    assert harness.worker_row(first.id)["status"] == "inactive"


@on_every_backend  # a gone process's liveness lock at default settings: advisory, or a lock file
def test_sigkill_at_default_settings_recovers_through_the_liveness_lock(
    harness: Harness,
) -> None:
    defaults = {
        "--heartbeat-interval": None,
        "--lease": None,
        "--reclaim-interval": None,
        "--liveness-interval": None,
    }
    victim = harness.start_worker(settings=defaults)
    job_ids = [harness.enqueue("hold", {"seconds": 120}) for _ in range(3)]
    harness.wait_for(
        lambda: (
            all(harness.job(j)["worker_id"] == victim.id for j in job_ids)
            and all(harness.started_file(j, 1).exists() for j in job_ids)
        ),
        10,
        "the victim to run all jobs",
    )
    survivor = harness.start_worker(settings=defaults)

    killed_at = victim.kill()

    def moved() -> bool:
        jobs = [harness.job(j) for j in job_ids]
        return all(j["status"] == "running" and j["worker_id"] == survivor.id for j in jobs)

    harness.wait_for(moved, 10, "the jobs to run on the survivor")
    back_after = time.time() - killed_at
    # PostgreSQL believes a free lock once it stayed free for LIVENESS_GRACE (a dropped
    # session is not a gone process): grace + a probe or two.
    bound = 3.0 if harness.backend == "sqlite" else LIVENESS_GRACE + 3.0
    assert back_after < bound, back_after  # where the 90 s lease would take 90-120 s
    for job_id in job_ids:
        harness.wait_for(lambda j=job_id: harness.started_file(j, 2).exists(), 5, "attempt 2")
        crash = harness.job(job_id)["executions"][0]["crash"]
        assert crash["detected_by"] == "liveness_lock"
        assert crash["worker_id"] == victim.id
    deactivated = survivor.events("worker_deactivated", worker_id=victim.id)
    assert deactivated and deactivated[0]["detected_by"] == "liveness_lock"
