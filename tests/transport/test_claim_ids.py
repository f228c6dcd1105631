"""`Store.claim_ids`: a message names a job; only a queued, runnable job is claimed, once,
whatever the number of messages naming it (both dialects, `conftest.store`)."""

from __future__ import annotations

from heartq.model import NewJob
from heartq.store.interface import Store


def test_claims_only_queued_runnable_jobs_once(store: Store) -> None:
    ready, later = store.enqueue([NewJob("t", "{}"), NewJob("t", "{}", delay=3600)])
    first = store.claim_ids("w1", [ready, ready, later, "no-such-job"], 30.0)
    assert [job.id for job in first] == [ready]
    assert first[0].execution_id == 1
    assert store.claim_ids("w2", [ready], 30.0) == []  # running elsewhere: nothing
    executions = store.get_job(ready)["executions"]
    assert len(executions) == 1


def test_due_for_publish_finds_stale_and_not_fresh(store: Store) -> None:
    (job,) = store.enqueue([NewJob("t", "{}")])
    now = store.clock()
    fresh, t = store.due_for_publish(["default"], now + 10, 0.0, 100)
    assert fresh == []
    stale, _ = store.due_for_publish(["default"], now + 10, now + 10, 100)
    assert stale == [(job, "default")]
    assert t > 0
