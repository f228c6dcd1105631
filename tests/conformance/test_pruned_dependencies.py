"""A dependency that succeeded and was since pruned (docs/design/pipelines.md, "Jobs that wait for
jobs"): the prune keeps a trace of the succeeded jobs it deletes, so a job enqueued later
may still depend on one (RQ counts a deleted finished dependency as met); an id that
never named a succeeded job is still `DependencyNotFound`, and the trace forgets an id
once it is older than `success_trace_retention`."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from heartq import lost_results
from heartq.errors import DependencyNotFound
from heartq.model import JobStatus
from heartq.store import Store, open_store
from heartq.store.postgres.connection import parse_url
from tests.support import wait_for

from .support import enqueue_one, new_ids, new_job
from .test_dependencies import run_to_end

DAY = 86400.0


def _pruned(store: Store, t0: float) -> tuple[str, str]:
    """A job that succeeded and one cancelled, both pruned; their ids."""
    done = enqueue_one(store, t0, task="done")
    run_to_end(store, t0 + 1)
    cancelled = enqueue_one(store, t0, task="cancelled")
    store.cancel_job(cancelled, now=t0 + 2)
    assert store.prune(DAY, DAY, now=t0 + 2 * DAY).jobs == 2
    return done, cancelled


def test_a_pruned_success_counts_as_a_succeeded_dependency(store: Store, t0: float) -> None:
    done, _ = _pruned(store, t0)
    assert done not in {j["id"] for j in store.list_jobs()}
    then = enqueue_one(store, t0 + 2 * DAY, task="then", depends_on=(done,))
    job = store.get_job(then)
    assert job["status"] == JobStatus.QUEUED and job["waiting_for"] == 0
    assert job["depends_on"] == [
        {"id": done, "task": None, "status": None, "ended": "succeeded", "holds": False}
    ]
    # beside a dependency of its own batch: only that one is waited for
    (in_batch,) = new_ids(1)
    _, last = store.enqueue(
        [new_job("first", id=in_batch), new_job("last", depends_on=(in_batch, done))],
        now=t0 + 2 * DAY,
    )
    assert store.get_job(last)["waiting_for"] == 1
    run_to_end(store, t0 + 2 * DAY + 1)  # `then`
    run_to_end(store, t0 + 2 * DAY + 2)  # `first`
    assert store.get_job(last)["status"] == JobStatus.QUEUED
    # a job that takes results is told its result is lost: it went with the job
    taker = enqueue_one(store, t0, depends_on=(done,), dependency_results=True)
    assert [(e.status, e.result, e.lost) for e in store.dependency_results(taker)] == [
        (None, None, lost_results.PRUNED)
    ]


def test_an_id_that_never_succeeded_is_still_not_found(store: Store, t0: float) -> None:
    done, cancelled = _pruned(store, t0)
    before = len(store.list_jobs())
    (never,) = new_ids(1)  # an id as heartq makes them, of no job stored
    for refused in ([never], [cancelled], [done, never]):
        with pytest.raises(DependencyNotFound) as error:
            enqueue_one(store, t0 + 2 * DAY, depends_on=tuple(refused))
        assert error.value.job_ids == [i for i in refused if i != done]
    assert len(store.list_jobs()) == before  # nothing stored


def test_the_trace_forgets_ids_older_than_its_retention(store: Store, t0: float) -> None:
    done, _ = _pruned(store, t0)  # its id was made about t0 (the database's clock now)
    store.prune(DAY, DAY, now=t0 + 2 * DAY, success_trace_retention=3 * DAY)
    enqueue_one(store, t0 + 2 * DAY, depends_on=(done,))  # remembered still
    store.prune(DAY, DAY, now=t0 + 4 * DAY, success_trace_retention=3 * DAY)
    with pytest.raises(DependencyNotFound):
        enqueue_one(store, t0 + 4 * DAY, depends_on=(done,))


def _blocked_by(watcher: Any, pid: int) -> list[int]:
    """The sessions waiting for a lock the session `pid` holds (or waits for ahead)."""
    query = "SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))"
    pids = [row[0] for row in watcher.execute(query, (pid,)).fetchall()]
    watcher.rollback()
    return pids


def test_a_retention_of_zero_keeps_no_trace(store: Store, t0: float) -> None:
    done = enqueue_one(store, t0)
    run_to_end(store, t0 + 1)
    assert store.prune(DAY, DAY, now=t0 + 2 * DAY, success_trace_retention=0).jobs == 1
    with pytest.raises(DependencyNotFound):
        enqueue_one(store, t0 + 2 * DAY, depends_on=(done,))


def test_an_enqueue_that_waited_for_a_prune_finds_the_trace(
    store: Store,
    t0: float,
    backend: str,
    connect: Any,
    store_url: str,
) -> None:
    """PostgreSQL: the prune deletes a dependency while an enqueue waits for its row
    lock; once the prune commits, the enqueue finds no row, and its look at the trace,
    a statement after the lock, sees what the prune wrote: met, not `DependencyNotFound`."""
    if backend == "sqlite":
        pytest.skip("SQLite has one writer: an enqueue and a prune never overlap")
    done = enqueue_one(store, t0, task="done")
    run_to_end(store, t0 + 1)
    holder, watcher = connect(), connect()
    schema = parse_url(store_url)[1]
    holder.execute(f"SELECT id FROM {schema}.job_documents WHERE id = %s FOR UPDATE", (done,))
    counts: list[int] = []
    pruner = threading.Thread(
        target=lambda: counts.append(store.prune(DAY, DAY, now=t0 + 2 * DAY).jobs)
    )
    other = open_store(store_url)
    enqueued: list[str] = []
    enqueuer = threading.Thread(
        target=lambda: enqueued.extend(other.enqueue([new_job("then", depends_on=(done,))]))
    )
    try:
        pruner.start()
        (prune,) = wait_for(lambda: _blocked_by(watcher, holder.info.backend_pid), 30, "prune")
        enqueuer.start()  # behind the prune, in the row's queue of waiters
        wait_for(lambda: _blocked_by(watcher, prune), 30, "the enqueue to wait for the prune")
        holder.commit()
        pruner.join(30)
        enqueuer.join(30)
        assert not pruner.is_alive() and not enqueuer.is_alive()
    finally:
        other.link.close()
    assert counts == [1]
    assert store.get_job(enqueued[0])["status"] == JobStatus.QUEUED
