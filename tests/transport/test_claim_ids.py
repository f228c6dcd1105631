"""`Store.claim_ids`: a message names a job; only a queued, runnable job is claimed, once,
whatever the number of messages naming it, and never after waiting for a row another
claim holds. `Store.due_for_publish`: what a transport's sweeper (re)publishes (both
dialects, `conftest.store`)."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

from heartq.model import DetectedBy, JobStatus, NewJob
from heartq.store.interface import Store
from tests.conftest import only_on

LEASE = 30.0
WAIT_DEADLINE = 5.0
"""Seconds a claim may take while another claim holds one of its rows: it skips that row
in milliseconds; one that waits for the row would wait for the other's commit."""


def test_claims_only_queued_runnable_jobs_once(store: Store) -> None:
    ready, later = store.enqueue([NewJob("t", "{}"), NewJob("t", "{}", delay=3600)])
    first = store.claim_ids("w1", [ready, ready, later, "no-such-job"], LEASE)
    assert [job.id for job in first] == [ready]
    assert first[0].execution_id == 1
    assert store.claim_ids("w2", [ready], LEASE) == []  # running elsewhere: nothing
    executions = store.get_job(ready)["executions"]
    assert len(executions) == 1


@only_on("postgres")
def test_a_row_another_claim_holds_is_skipped_not_waited_for(store: Store) -> None:
    """Workers claim the ids their messages name at once, and a job's messages may reach
    several (duplicates are harmless): a claim meeting a row another claim is taking
    skips it at once (the job is active elsewhere) and takes the rest, instead of
    waiting for that claim's commit. Claimer A's claim of one job is made, not yet
    committed, while claimer B asks for it and another one."""
    from heartq.store.postgres import queries

    held, free = store.enqueue([NewJob("t", "{}"), NewJob("t", "{}")])
    dialect: Any = store.dialect  # type: ignore[attr-defined]
    with ThreadPoolExecutor(1) as pool:
        with dialect.write() as conn:  # claimer A: its claim made, not yet committed
            params = {"worker_id": "wa", "ids": [held], "lease": LEASE,
                      "now": dialect.clock(conn, None), "ahead": False}  # fmt: skip
            rows = conn.execute(queries.CLAIM_IDS, params).fetchall()
            assert [row["id"] for row in rows] == [held]
            claim_b = pool.submit(store.claim_ids, "wb", [held, free], LEASE)
            answered = wait([claim_b], timeout=WAIT_DEADLINE).done
        # A commits here, which ends a wait; B's answer is read after it either way
        assert answered, "claim_ids waited for a row another claim holds"
        assert [job.id for job in claim_b.result()] == [free]
    running = {j["id"]: j["worker_id"] for j in store.list_jobs(status="running")}
    assert running == {held: "wa", free: "wb"}


def test_due_for_publish_finds_stale_and_not_fresh(store: Store) -> None:
    (job,) = store.enqueue([NewJob("t", "{}")])
    now = store.clock()
    fresh, t = store.due_for_publish(["default"], now + 10, 0.0, 100)
    assert fresh == []
    stale, _ = store.due_for_publish(["default"], now + 10, now + 10, 100)
    assert stale == [(job, "default")]
    assert t > 0


def test_due_for_publish_finds_a_job_requeued_since_and_not_a_new_one(store: Store) -> None:
    """A job put back since the last pass (reaped here; released and replayed alike) has
    no message left, so the sweeper publishes it: its `updated_at` is after `since`,
    though a reaped job keeps its `run_at` (its place in line). A job enqueued since,
    whose enqueue published it already, is not published again (its `updated_at` is its
    `created_at`) until it has waited `republish_after` (`waiting_since`)."""
    t0 = float(math.floor(store.clock()))
    (reaped,) = store.enqueue([NewJob("t", "{}")], now=t0)
    assert len(store.claim_ids("w1", [reaped], 5.0, now=t0 + 1)) == 1
    (new,) = store.enqueue([NewJob("t", "{}")], now=t0 + 6)
    (back,) = store.reclaim_expired(DetectedBy.LEASE_EXPIRED, now=t0 + 10)
    assert back.status is JobStatus.QUEUED
    job = store.get_job(reaped)
    assert job["run_at"] == job["created_at"]  # its place in line: only `updated_at` moved
    found, _ = store.due_for_publish(["default"], t0 + 5, 0.0, 100, now=t0 + 11)
    assert found == [(reaped, "default")]
    after, _ = store.due_for_publish(["default"], t0 + 10.5, 0.0, 100, now=t0 + 11)
    assert after == []  # requeued before this pass's `since`: an earlier pass published it
    stale, _ = store.due_for_publish(["default"], t0 + 10.5, t0 + 7, 100, now=t0 + 11)
    assert sorted(stale) == sorted([(reaped, "default"), (new, "default")])
