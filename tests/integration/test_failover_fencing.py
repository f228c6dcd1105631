"""A failover that forgets a claim: the fencing token of the forgotten attempt is not the
token of the attempt the new primary hands the job to (docs/design/database-bad-days.md, "A
failover that forgets a claim").

A private primary streams asynchronously to a hot standby (`tests/pg_replication.py`).
The standby is cut off, worker w1 claims a job on the primary (the commit returns: the
claim is acknowledged), the primary dies and the standby is promoted without that
claim. The job is queued again there, and w2 claims it under the same execution id.
Both attempts are alive, both holding a lease the same `(job, execution id)`; only w2's
may renew, report, checkpoint, release or finish, and w1's completion inside its task's
transaction rolls back. Store calls from the test's own process stand for the two
workers: every write is the worker's own statement, sent through the multi-host URL the
workers use.

In the heavy tier (a private primary and standby), outside the default suite: `scripts/test
--heavy`; the conformance suite's fencing cases (tests/conformance/test_fencing.py) hold the
same token on both backends in the default suite.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

from heartq.errors import LeaseLost
from heartq.lifecycle.fate import succeeded
from heartq.model import (
    ClaimedJob,
    Finish,
    JobStatus,
    Outcome,
    Progress,
    PulseReport,
    Renewal,
    RenewStatus,
    Report,
)
from heartq.store import Store
from tests.conformance.support import new_job, register
from tests.conftest import BACKENDS
from tests.pg_replication import StreamingPair
from tests.support import opened, wait_for

pytestmark = [
    pytest.mark.heavy,
    pytest.mark.timeout(240),
    pytest.mark.skipif("postgres" not in BACKENDS, reason="PostgreSQL only"),
]

LEASE = 600.0
T = TypeVar("T")


@pytest.fixture
def pair() -> Iterator[StreamingPair]:
    streaming = StreamingPair(synchronous=False)
    try:
        yield streaming
    finally:
        streaming.close()


def answered(call: Callable[[], T]) -> T:
    """`call()` once the new primary answers (the store's connections went down with the
    old one; a call may fail while they reconnect)."""
    result: list[T] = []

    def attempt() -> bool:
        try:
            result.append(call())
        except Exception:  # noqa: BLE001 - the store reconnects to the new primary
            return False
        return True

    wait_for(attempt, timeout=60.0, what="the new primary to answer")
    return result[0]


def test_an_execution_id_issued_again_fences_out_the_forgotten_claim(
    pair: StreamingPair,
) -> None:
    with opened(pair.url(schema="heartq_failover_fencing")) as store:
        store.link.migrate()
        for worker_id in ("w1", "w2"):
            register(store, worker_id, store.clock())
        (job_id,) = store.enqueue([new_job("task")])
        pair.wait_replayed()  # the standby has the job, queued

        pair.cut_replication()
        (forgotten,) = store.claim("w1", ["default"], 1, LEASE)  # acknowledged...
        pair.failover()  # ...and gone with the old primary

        (current,) = answered(lambda: store.claim("w2", ["default"], 1, LEASE))
        assert current.id == job_id
        # the hazard's precondition: the new primary issued the same execution id again
        assert current.execution_id == forgotten.execution_id
        assert current.lease == forgotten.lease  # equal as (job, execution): the worker differs

        both_alive(store, forgotten, current)


def both_alive(store: Store, forgotten: ClaimedJob, current: ClaimedJob) -> None:
    """Each write of the forgotten attempt is refused and changes nothing; the same
    write of the current one lands."""
    before = store.get_job(current.id)
    lost = RenewStatus.LOST
    assert store.heartbeat("w1", [Renewal(forgotten.lease)], LEASE) == {forgotten.lease: lost}
    progress = Report(progress=Progress(0.5, "stale"))
    assert store.pulse([PulseReport(forgotten.lease, progress)]) == {forgotten.lease: lost}
    with pytest.raises(LeaseLost):
        store.save_checkpoint(forgotten.lease, '{"stale": true}')
    with pytest.raises(LeaseLost), store.completing(forgotten.lease) as conn:
        conn.execute("CREATE TABLE effects (id text)")  # rolled back with the completion
    assert store.release([forgotten.lease]) == [forgotten.lease]
    assert store.finish([succeeded(forgotten, '"w1"')]) == [forgotten.lease]
    after = store.get_job(current.id)
    assert (after["status"], after["worker_id"], after["execution_id"]) == (
        "running",
        "w2",
        current.execution_id,
    )
    assert after["checkpoint"] == before["checkpoint"] and after["progress"] == before["progress"]
    assert after["lease_expires_at"] == before["lease_expires_at"]

    renewed = RenewStatus.RENEWED
    assert store.heartbeat("w2", [Renewal(current.lease)], LEASE) == {current.lease: renewed}
    fresh = Finish(current.lease, Outcome.SUCCEEDED, JobStatus.SUCCEEDED, result_json='"w2"')
    assert store.finish([fresh]) == []
    done = store.get_job(current.id)
    assert (done["status"], done["result"], done["worker_id"]) == ("succeeded", "w2", "w2")
    assert [(e["execution_id"], e["worker_id"], e["outcome"]) for e in done["executions"]] == [
        (current.execution_id, "w2", "succeeded")
    ]
