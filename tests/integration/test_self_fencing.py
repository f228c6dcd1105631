"""Self-fencing: a worker that cannot renew stops trusting its leases before they expire,
stops those attempts and never reports them (docs/design/protocol.md step 13).

The outage blocks the worker's writes without touching anything shared. SQLite: the test
holds the file's write lock (`BEGIN EXCLUSIVE`). PostgreSQL: the test holds row locks on
the job's lease and the worker row (`FOR UPDATE`), which the one heartbeat statement must take,
so no renewal can commit. `test_postgres_outages.py` also stops a whole (private) server."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from heartq.model import NewJob
from heartq.store.postgres.queries import common as pg_q
from heartq.store.sqlite.queries import common as sqlite_q
from tests.conftest import on_every_backend
from tests.support import wait_for

from .conftest import Harness, WorkerProc, only_on, parse_ts

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

    # The outage: from here on no heartbeat can commit.
    with block_writes(harness, worker, job_id) as lease_expires_at:
        locked_at = time.monotonic()
        untrusted = wait_untrusted(harness, worker, job_id, locked_at + OUTAGE - time.monotonic())
        assert time.monotonic() < locked_at + OUTAGE
        # It gave the job up before anyone else could have taken it (DB time).
        assert parse_ts(untrusted["ts"]) < lease_expires_at, (untrusted, lease_expires_at)
        assert untrusted["trust_window"] == pytest.approx(TRUST_WINDOW)
        if harness.backend == "postgres":  # the outage was real: its renewal is stuck
            assert any(s["wait_event_type"] == "Lock" for s in harness.sessions(worker))
        time.sleep(max(0.0, locked_at + OUTAGE - time.monotonic()))  # the outage's length
    # The database is back.

    done = harness.wait_status(job_id, "succeeded", 15)
    first = done["executions"][0]
    assert first["execution_id"] == 1
    # Given back by the worker itself once the database answered, never reported by the
    # fenced attempt; the database failed it, not the job: not counted as an attempt.
    assert first["outcome"] == "interrupted", done["executions"]
    assert first["crash"]["detected_by"] == "self_fence"
    assert done["executions"][-1]["outcome"] == "succeeded"
    assert all(e["outcome"] != "succeeded" for e in done["executions"] if e["execution_id"] == 1)
    assert done["result"]["execution_id"] > 1
    assert done["result"]["attempt"] == 1 and done["attempts"] == 1
    # logged once the worker's finish returns, which may be a moment after its commit
    succeeded = harness.wait_for(
        lambda: worker.job_events("job_succeeded", job_id), 5, "job_succeeded"
    )
    assert not [e for e in succeeded if e["execution_id"] == 1]
    assert worker.job_events("lease_lost", job_id)
    assert worker.alive()


@contextlib.contextmanager
def block_writes(harness: Harness, worker: WorkerProc, job_id: str) -> Iterator[float]:
    """Block every write the worker's heartbeat makes; yields the job's effective lease
    expiry (DB clock, epoch seconds: its worker's lease while attached, design/leases.md,
    "Leases and heartbeats"): nothing can renew it while the block holds, so it is final."""
    if harness.backend == "sqlite":
        blocker = sqlite3.connect(harness.db_path, timeout=10, isolation_level=None)
        try:
            blocker.execute("BEGIN EXCLUSIVE")
            (lease_expires_at,) = blocker.execute(
                f"SELECT {sqlite_q.EFFECTIVE_LEASE} FROM heartq_jobs AS j"
                " LEFT JOIN heartq_workers AS w ON w.id = j.worker_id WHERE j.id = ?",
                (job_id,),
            ).fetchone()
            yield float(lease_expires_at)
        finally:
            blocker.close()  # rolls back
        return
    blocker = harness.pg_connect(autocommit=False)
    try:
        lease_expires_at = wait_for(
            lambda: lock_rows(blocker, worker.id, job_id), 10, "the row locks of the outage"
        )
        yield lease_expires_at
    finally:
        blocker.close()  # rolls back: the locks go


def lock_rows(blocker: psycopg.Connection[Any], worker_id: str, job_id: str) -> float | None:
    """Lock the worker row and the job's lease; None if a heartbeat holds one right now (it
    locks both in one statement, in no set order: waiting could deadlock with it)."""
    try:
        blocker.execute(
            "SELECT id FROM workers WHERE id = %s FOR UPDATE NOWAIT", (worker_id,)
        ).fetchone()
        row = blocker.execute(
            f"SELECT extract(epoch FROM {pg_q.EFFECTIVE_LEASE})::float8 FROM leases AS j"
            " LEFT JOIN workers AS w ON w.id = j.worker_id"
            " WHERE j.job_id = %s FOR UPDATE OF j NOWAIT",
            (job_id,),
        ).fetchone()
    except psycopg.errors.LockNotAvailable:
        blocker.rollback()
        return None
    assert row is not None and row[0] is not None, row
    return float(row[0])


def wait_untrusted(
    harness: Harness, worker: WorkerProc, job_id: str, timeout: float
) -> dict[str, Any]:
    events = harness.wait_for(
        lambda: worker.job_events("leases_untrusted", job_id),
        max(0.0, timeout),
        "leases_untrusted while the database is locked",
    )
    return events[0]


@on_every_backend  # an outage as each database shows it: row locks, the file's write lock
def test_worker_fences_itself_when_the_database_is_unreachable(harness: Harness) -> None:
    run_outage(harness, "--concurrency", "1")


def test_self_fencing_with_free_slots(harness: Harness) -> None:
    """With free slots the main loop keeps trying to claim: that must not stop it from
    fencing its running jobs on time."""
    run_outage(harness, "--concurrency", "4")


@only_on("sqlite")
def test_a_claim_that_waited_for_the_database_is_trusted_from_when_it_was_sent(
    harness: Harness,
) -> None:
    """Regression: a worker's trust in a claimed lease used to start before the claim
    waited for its connection or write lock, so a claim that waited longer than the trust
    window was given up the moment it returned (seen after a PostgreSQL restart:
    `leases_untrusted` 0.27 s after the claim). The claim here waits on SQLite's write lock,
    held by the test for twice the trust window; its job must then run to success on its
    first execution, with no retry to spare."""
    worker = harness.start_worker("--concurrency", "1", settings=SETTINGS)
    job = NewJob(task="hold", args_json='{"seconds": 0.8}', max_retries=0, delay=0.5)
    job_id = harness.store.enqueue([job])[0]
    blocker = sqlite3.connect(harness.db_path, timeout=10, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")  # before the job is due: its claim must wait
        time.sleep(2 * TRUST_WINDOW)  # the outage's length
    finally:
        blocker.close()
    done = harness.wait_status(job_id, "succeeded", 15)
    assert [e["outcome"] for e in done["executions"]] == ["succeeded"], done["executions"]
    assert not worker.events("leases_untrusted")
    assert worker.alive()
