"""A claim that commits without waiting for its flush (`?claim_commit=async`,
`heartq/store/postgres/claim_commit.py`), on a private cluster crashed under it (`pg_ctl
stop -m immediate`: its processes quit, what its WAL buffers held is gone). The
cluster's WAL writer sleeps 10 s, so a commit that did not wait is still in those
buffers when the test crashes the server a few milliseconds later: what the claim's
commit waited for decides what the restarted server remembers.

- `flush` (the default): the claim is remembered, its job running under its lease.
- `async`: the claim is forgotten, its job queued again; claimed again, by another
  worker, under the same execution id; the forgotten attempt's finish is refused (the
  fencing token names the worker), the new one's lands.
- `async` on a server up less than `DURABLE_AFTER_START`: the claim waits, remembered
  (what bounds the attempts of a task that crashes the server itself).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from heartq.lifecycle import fate
from heartq.model import ClaimedJob, NewJob
from heartq.store import open_store
from heartq.store.interface import Store
from tests import pg_harness

from .conftest import only_on

pytestmark = [pytest.mark.slow, only_on("postgres")]


@pytest.fixture
def cluster() -> Iterator[pg_harness.PrivateCluster]:
    """A private cluster whose WAL writer writes only every 10 s."""
    server = pg_harness.PrivateCluster(settings={"wal_writer_delay": "10s"})
    try:
        yield server
    finally:
        server.close()


def claim_then_crash(
    cluster: pg_harness.PrivateCluster, schema: str, claim_commit: str, async_after: float | None
) -> tuple[ClaimedJob, str]:
    """Enqueue a job, claim it as worker `w` through a store of `claim_commit` (its
    server's uptime threshold set to `async_after` if given), crash the server at once,
    start it again. Returns the claimed job and its status as the server remembers it."""
    url = f"{cluster.url}?schema={schema}&claim_commit={claim_commit}"
    store = open_store(url)
    if async_after is not None:
        store.link.pool.claim_async_after = async_after  # type: ignore[attr-defined]
    try:
        store.link.migrate()
        (job_id,) = store.enqueue([NewJob(task="noop", args_json="{}")])
        (claimed,) = store.claim("w", ["default"], 1, lease=60.0)
        cluster.stop("immediate")
    finally:
        store.link.close()
    cluster.start()
    return claimed, status_of(url, job_id)


def status_of(url: str, job_id: str) -> str:
    store = open_store(url)
    try:
        return str(store.get_job(job_id)["status"])
    finally:
        store.link.close()


def test_a_claim_that_waits_for_its_flush_is_remembered(
    cluster: pg_harness.PrivateCluster, backend: str
) -> None:
    _, status = claim_then_crash(cluster, "heartq_flush", "flush", None)
    assert status == "running"


def test_a_young_server_keeps_claims_durable_even_when_async(
    cluster: pg_harness.PrivateCluster, backend: str
) -> None:
    _, status = claim_then_crash(cluster, "heartq_young", "async", None)  # up for seconds
    assert status == "running"


def test_an_async_claim_forgotten_by_a_crash_is_claimed_again_and_fenced(
    cluster: pg_harness.PrivateCluster, backend: str
) -> None:
    forgotten, status = claim_then_crash(cluster, "heartq_async", "async", 0.0)
    assert status == "queued"
    store: Store = open_store(f"{cluster.url}?schema=heartq_async")
    try:
        (again,) = store.claim("w2", ["default"], 1, lease=60.0)
        assert again.id == forgotten.id
        assert again.execution_id == forgotten.execution_id  # issued again: not a token alone
        assert store.finish([fate.succeeded(forgotten, None)]) == [forgotten.lease]  # lost
        assert store.finish([fate.succeeded(again, None)]) == []  # landed
        job = store.get_job(forgotten.id)
        assert job["status"] == "succeeded"
        assert [e["worker_id"] for e in job["executions"]] == ["w2"]
    finally:
        store.link.close()
