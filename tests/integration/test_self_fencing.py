"""Self-fencing: a worker that cannot renew stops trusting its leases before they expire,
stops those attempts and never reports them (DESIGN.md step 9)."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

import pytest

from .conftest import Harness, WorkerProc, parse_ts

pytestmark = pytest.mark.slow

SETTINGS = {"--heartbeat-interval": "0.2", "--lease": "1.2"}
TRUST_WINDOW = 1.2 - 1.2 / 6
OUTAGE = 2.5
"""How long the database stays unwritable: well past the trust window and the lease."""


def run_outage(harness: Harness, *extra: str) -> None:
    worker = harness.start_worker(*extra, settings=SETTINGS)
    job_id = harness.enqueue("hold_first", {"seconds": 120})
    harness.wait_for(lambda: harness.started_file(job_id, 1).exists(), 10, "attempt 1 to start")
    harness.wait_job(job_id, lambda j: j["heartbeat_at"] != j["started_at"], 5, "a renewal")

    # The outage: hold SQLite's write lock, so no heartbeat can commit.
    blocker = sqlite3.connect(harness.db_path, timeout=10, isolation_level=None)
    try:
        blocker.execute("BEGIN EXCLUSIVE")
        locked_at = time.monotonic()
        # Nothing can renew the lease from here on: this is its final expiry (DB clock).
        (lease_expires_at,) = blocker.execute(
            "SELECT lease_expires_at FROM heartq_jobs WHERE id = ?", (job_id,)
        ).fetchone()
        untrusted = wait_untrusted(harness, worker, job_id, locked_at + OUTAGE - time.monotonic())
        assert time.monotonic() < locked_at + OUTAGE
        # It gave the job up before anyone else could have taken it (DB time).
        assert parse_ts(untrusted["ts"]) < lease_expires_at, (untrusted, lease_expires_at)
        assert untrusted["trust_window"] == pytest.approx(TRUST_WINDOW)
        time.sleep(max(0.0, locked_at + OUTAGE - time.monotonic()))  # the outage's length
    finally:
        blocker.close()  # rolls back: the database is back

    done = harness.wait_status(job_id, "succeeded", 15)
    first = done["executions"][0]
    assert first["execution_id"] == 1
    assert first["outcome"] == "crashed"  # reclaimed, never reported by the fenced attempt
    assert done["executions"][-1]["outcome"] == "succeeded"
    assert all(e["outcome"] != "succeeded" for e in done["executions"] if e["execution_id"] == 1)
    assert done["result"]["execution_id"] > 1
    assert done["result"]["attempt"] >= 2
    assert not [e for e in worker.job_events("job_succeeded", job_id) if e["attempt"] == 1]
    assert worker.job_events("lease_lost", job_id)
    assert worker.alive()


def wait_untrusted(
    harness: Harness, worker: WorkerProc, job_id: str, timeout: float
) -> dict[str, Any]:
    events = harness.wait_for(
        lambda: worker.job_events("leases_untrusted", job_id),
        max(0.0, timeout),
        "leases_untrusted while the database is locked",
    )
    return events[0]


def test_worker_fences_itself_when_the_database_is_unreachable(harness: Harness) -> None:
    run_outage(harness, "--concurrency", "1")


def test_self_fencing_with_free_slots(harness: Harness) -> None:
    """With free slots the main loop keeps trying to claim: that must not stop it from
    fencing its running jobs on time."""
    run_outage(harness, "--concurrency", "4")
