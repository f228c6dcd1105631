"""Schema v41 on PostgreSQL (docs/UPGRADING.md, "Schema v41"): the success of a job the
ready log held ends on a narrow row of its own (`job_ends`), and the job's document is
left as its enqueue wrote it. Every reader sees the job succeeded, with its result and
its attempt, as before; every other end (a failure, a job with dependents or a unique
key, a due job) is written on the document as before; a prune deletes both rows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from heartq.lifecycle.fate import failed, succeeded
from heartq.model import CancelResult, JobStatus, Outcome
from heartq.store import Store
from heartq.store.postgres.connection import parse_url
from tests.support import opened

from .support import claim_one, enqueue_one, new_job


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[Store]:
    with opened(pg_url) as store:
        yield store


def _one(store: Store, sql: str, *args: Any) -> dict[str, Any] | None:
    with store._write() as conn:  # type: ignore[attr-defined]
        row = conn.execute(sql, args).fetchone()
    return dict(row) if row else None


def _version(store: Store, job_id: str) -> dict[str, Any] | None:
    """The document's row version (a new one is made by every update, none by a lock)
    and what it says."""
    return _one(
        store,
        "SELECT xmin::text AS xmin, ctid::text AS ctid, status, finished_at IS NULL AS open"
        " FROM job_documents WHERE id = %s",
        job_id,
    )


def _end_row(store: Store, job_id: str) -> dict[str, Any] | None:
    return _one(
        store,
        "SELECT status, execution_id, worker_id, attempts, result::text AS result"
        " FROM job_ends WHERE job_id = %s",
        job_id,
    )


def test_a_success_of_the_ready_log_is_appended_and_its_document_left_alone(
    pg_store: Store,
) -> None:
    """The enqueue writes the document; the claim, the success and every reader after it
    leave it as written (same row version), and the end row holds the end: the job reads
    succeeded with its result, attempt, worker and one succeeded execution."""
    t0 = float(int(pg_store.clock()))
    job_id = enqueue_one(pg_store, t0)
    enqueued = _version(pg_store, job_id)
    job = claim_one(pg_store, "w1", t0 + 1)
    assert pg_store.finish([succeeded(job, '{"rows": 3}')], now=t0 + 2) == []
    assert _version(pg_store, job_id) == enqueued
    assert _end_row(pg_store, job_id) == {
        "status": "succeeded", "execution_id": job.lease.execution_id, "worker_id": "w1",
        "attempts": 1, "result": '{"rows": 3}',
    }  # fmt: skip
    shown = pg_store.get_job(job_id)
    assert (shown["status"], shown["result"], shown["attempts"], shown["worker_id"]) == (
        "succeeded", {"rows": 3}, 1, "w1",
    )  # fmt: skip
    assert shown["finished_at"] is not None and shown["started_at"] is not None
    assert [e["outcome"] for e in shown["executions"]] == ["succeeded"]
    assert pg_store.job_end(job_id).status == JobStatus.SUCCEEDED
    counts = {(queue, status): n for queue, status, n in pg_store.count_jobs()}
    assert counts == {("default", "succeeded"): 1}
    assert pg_store.claim("w2", ["default"], 10, 30.0, now=t0 + 3) == []
    assert pg_store.cancel_job(job_id, now=t0 + 4) == CancelResult.ALREADY_FINISHED
    assert _version(pg_store, job_id) == enqueued


def test_every_other_end_is_written_on_the_document(pg_store: Store) -> None:
    """A unique job's success, a success with dependents, a due job's success and a
    failure each write the document as before, and append no end row."""
    t0 = float(int(pg_store.clock()))
    unique = enqueue_one(pg_store, t0, task="unique", unique_key="u1")
    holder = enqueue_one(pg_store, t0, task="holder")
    (waiting,) = pg_store.enqueue([new_job("then", depends_on=(holder,))], now=t0)
    delayed = enqueue_one(pg_store, t0 - 5, task="later", delay=3)
    doomed = enqueue_one(pg_store, t0, task="doomed", max_retries=0)
    claimed = pg_store.claim("w1", ["default"], 10, 30.0, now=t0 + 1)
    assert {job.id for job in claimed} == {unique, holder, delayed, doomed}
    ends = [
        failed(job, Outcome.FAILED, "boom") if job.id == doomed else succeeded(job, "1")
        for job in claimed
    ]
    assert pg_store.finish(ends, now=t0 + 2) == []
    for job_id, status in ((unique, "succeeded"), (holder, "succeeded"),
                           (delayed, "succeeded"), (doomed, "dead")):  # fmt: skip
        assert _end_row(pg_store, job_id) is None, job_id
        document = _version(pg_store, job_id)
        assert document is not None and (document["status"], document["open"]) == (
            status, False)  # fmt: skip
    assert pg_store.get_job(waiting)["status"] == "queued"


def test_a_pruned_success_takes_its_end_row_with_it(pg_store: Store) -> None:
    """A prune past the retention deletes the document and its end row, and keeps the
    id in the trace of pruned successes, so a later dependent counts it succeeded."""
    t0 = float(int(pg_store.clock()))
    job_id = enqueue_one(pg_store, t0)
    pg_store.finish([succeeded(claim_one(pg_store, "w1", t0 + 1), "1")], now=t0 + 2)
    assert pg_store.prune(3600.0, 10.0, now=t0 + 100).jobs == 1
    assert _end_row(pg_store, job_id) is None and _version(pg_store, job_id) is None
    (then,) = pg_store.enqueue([new_job("then", depends_on=(job_id,))], now=t0 + 101)
    assert pg_store.get_job(then)["status"] == "queued"


@pytest.mark.parametrize("since", ["claimed", "running"])
def test_a_repeatable_read_enqueue_never_waits_on_a_job_that_ended_after_its_snapshot(
    pg_store: Store, pg_url: str, since: str
) -> None:
    """A caller's REPEATABLE READ transaction took its snapshot while the dependency was
    queued (then claimed) or running; it succeeded since, on an end row, which that
    snapshot cannot see. The enqueue of a dependent in that transaction fails with a
    serialization error (its entry or its lease was deleted after the snapshot), never
    inserts a dependent that would wait for an end already past; retried, it is queued."""
    t0 = float(int(pg_store.clock()))
    first = enqueue_one(pg_store, t0)
    job = claim_one(pg_store, "w1", t0 + 1) if since == "running" else None
    with psycopg.connect(parse_url(pg_url)[0]) as caller:
        caller.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        caller.execute("SELECT 1")  # the snapshot
        job = job or claim_one(pg_store, "w1", t0 + 1)
        assert pg_store.finish([succeeded(job, "1")], now=t0 + 2) == []
        with pytest.raises(psycopg.errors.SerializationFailure):
            pg_store.enqueue([new_job("then", depends_on=(first,))], connection=caller)
        caller.rollback()
    (then,) = pg_store.enqueue([new_job("then", depends_on=(first,))], now=t0 + 3)
    assert pg_store.get_job(then)["status"] == "queued"
