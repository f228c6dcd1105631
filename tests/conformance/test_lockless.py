"""Workers that hold no liveness lock: PostgreSQL behind a connection pooler in
transaction mode without a direct URL (`?pooler=transaction`, `store/postgres/pooler.py`).

Such a worker has no session to hold a lock on, so its lock is always free: the probes,
the operator's reads and startup reconciliation must never take that for its death (its
row says it holds none), and judge it by its silence alone. Workers that do hold one,
on the same queue, are still found dead through it, by any prober, through the pooler
too. And a store that cannot LISTEN says so (its workers poll).

Each test opens two stores on the backend's fresh queue: `locking`, whose workers hold a
lock, and `lockless`. On `postgres` the lockless one is the same URL with
`pooler=transaction` (the mode needs no pooler: it only gives up session state); on
`pgbouncer` (opt-in, `HEARTQ_TEST_BACKENDS=pgbouncer`) the lockless one is the backend's
own store through PgBouncer, and the locking one the same URL with a direct URL to the
server for its lock.
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote

import pytest

from heartq.model import DetectedBy, JobStatus, WorkerInfo
from heartq.store import Store, open_store
from tests.conftest import BACKENDS

from .support import claim_one, enqueue_one, register, worker

pytestmark = pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "sqlite"])
"""SQLite has no pooler mode: its workers always hold a lock file."""


@pytest.fixture
def stores(
    backend: str, store_url: str, request: pytest.FixtureRequest
) -> Iterator[tuple[Store, Store]]:
    """`(locking, lockless)` stores on one fresh, migrated queue."""
    if backend == "pgbouncer":
        server = request.getfixturevalue("pg_server_url")
        urls = (f"{store_url}&direct_url={quote(server, safe='')}", store_url)
    else:
        urls = (store_url, f"{store_url}&pooler=transaction")
    locking, lockless = (open_store(url) for url in urls)
    try:
        locking.link.migrate()
        lockless.link.migrate()
        yield locking, lockless
    finally:
        locking.link.close()
        lockless.link.close()


@pytest.fixture
def t0(stores: tuple[Store, Store]) -> float:
    return float(int(stores[0].clock()))


def test_a_store_behind_a_transaction_pooler_holds_no_lock_and_cannot_listen(
    stores: tuple[Store, Store],
) -> None:
    locking, lockless = stores
    assert (locking.link.holds_liveness_lock, locking.link.supports_notify) == (True, True)
    assert (lockless.link.holds_liveness_lock, lockless.link.supports_notify) == (False, False)
    lockless.link.liveness_hold("pooled").close()  # nothing held, nothing to close
    assert lockless.link.listen(lambda: None) is None
    assert lockless.link.listen_ends(lambda _job_id: None) is None
    assert lockless.link.listen_cancels("pooled", lambda: None) is None


def test_the_probes_leave_a_worker_without_a_lock_alone(
    stores: tuple[Store, Store], t0: float
) -> None:
    """Three workers: `pooled` (no lock, through the pooler), `holding` (holds its lock;
    an id no other test holds: liveness locks are keyed by worker id in every schema of
    the database), `gone` (registered to hold one, holds none: its process died). Probes
    spanning the grace, run by the lockless store as a pooled worker's maintenance runs
    them, reclaim `gone` alone; the operator's read (`liveness_free`) shows `gone`
    alone."""
    locking, lockless = stores
    register(lockless, "pooled", t0)
    register(locking, "holding", t0)
    register(locking, "gone", t0)
    for _ in range(3):
        enqueue_one(locking, t0)
    jobs = {w: claim_one(locking, w, t0, lease=600) for w in ("pooled", "holding", "gone")}
    handles = [lockless.link.liveness_hold("pooled"), locking.link.liveness_hold("holding")]
    try:
        assert locking.liveness_free(["pooled", "holding", "gone"]) == ["gone"]
        assert lockless.liveness_probe(DetectedBy.LIVENESS_LOCK, now=t0 + 1) == []
        assert set(lockless.liveness_suspects()) == {"gone"}
        grace = lockless.liveness_grace
        dead = lockless.liveness_probe(DetectedBy.LIVENESS_LOCK, now=t0 + 1 + grace)
        assert [d.id for d in dead] == ["gone"]
        assert [r.job_id for r in dead[0].reclaimed] == [jobs["gone"].id]
        for name in ("pooled", "holding"):
            assert worker(locking, name)["status"] == "active"
            job = locking.get_job(jobs[name].id)
            assert (job["status"], job["worker_id"]) == (JobStatus.RUNNING, name)
        assert lockless.liveness_suspects() == {}
    finally:
        for handle in handles:
            handle.close()


def test_reconciliation_judges_a_namesake_without_a_lock_by_its_silence(
    stores: tuple[Store, Store], t0: float
) -> None:
    """A restarted pooled worker's earlier incarnation held no lock: its namesake cannot
    tell from a lock whether it is gone, so it is left its jobs until it is silent past
    its own threshold, then reclaimed (as the stale-worker monitor would)."""
    _, lockless = stores
    lockless.register_worker(
        WorkerInfo(
            id="old",
            hostname="test-host",
            pid=1,
            queues=("default",),
            concurrency=1,
            name="pod-1",
            stale_after=30.0,
        ),
        now=t0,
    )
    enqueue_one(lockless, t0)
    job = claim_one(lockless, "old", t0, lease=600)
    early = lockless.reclaim_by_name("pod-1", "new", DetectedBy.RECONCILIATION, now=t0 + 5)
    assert (early.reclaimed, early.suspected) == ([], [])
    assert [n.id for n in early.alive] == ["old"]
    assert lockless.get_job(job.id)["status"] == JobStatus.RUNNING
    late = lockless.reclaim_by_name("pod-1", "new", DetectedBy.RECONCILIATION, now=t0 + 31)
    assert [r.job_id for r in late.reclaimed] == [job.id]
    assert worker(lockless, "old")["status"] == "inactive"
