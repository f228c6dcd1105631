"""A worker SIGKILLed between its task's commit and its return (docs/design/pipelines.md, "Effects
exactly once"): a task that handed its result to the commit (`ctx.commit_result`) keeps
it, and a group's callback receives it; one that did not loses it, and says so: its
callback receives the documented marker (`heartq.LostResult`, stored in the callback's
own result as its JSON), never a None in its place, and `app.result()` raises
`heartq.ResultLost`. A worker that lives, its heartbeats landing, keeps a result whose save
comes later than the committing attempt's lease: only a worker whose lease ran out loses
it (docs/design/leases.md, "Leases and heartbeats"). Real worker processes on both
backends, the thread pool (the task runs in the worker's process) and the process pool (in
a child of it)."""

from __future__ import annotations

import json

import pytest

import heartq
from heartq.ids import new_job_id
from heartq.model import NewJob
from tests.conftest import on_every_backend

from .conftest import STEADY, Harness, parse_ts

LEASE = float(STEADY["--lease"] or 0)

pytestmark = [pytest.mark.slow, on_every_backend]


@pytest.mark.parametrize("pool", ["thread", "process"])
def test_a_worker_killed_between_the_commit_and_the_return(harness: Harness, pool: str) -> None:
    worker = harness.start_worker("--pool", pool, "--concurrency", "4", settings=STEADY)
    ids = [new_job_id() for _ in range(3)]
    jobs = [
        NewJob(task="commit_and_wait", args_json=json.dumps({"value": "handed", "hand": True}),
               id=ids[0]),
        NewJob(task="commit_and_wait", args_json=json.dumps({"value": "returned"}), id=ids[1]),
        NewJob(task="quick", args_json=json.dumps({"value": 3}), id=ids[2]),
    ]  # fmt: skip
    callback = NewJob(
        task="collect", args_json="{}", depends_on=tuple(ids), dependency_results=True
    )
    *_, callback_id = harness.store.enqueue([*jobs, callback])
    for job_id in ids[:2]:
        harness.wait_for(
            lambda j=job_id: harness.path(f"committed-{j}-1").exists(), 30, f"{job_id}'s commit"
        )
    assert [harness.job(j)["status"] for j in ids[:2]] == ["succeeded", "succeeded"]
    worker.kill()  # between the commit and the return of both
    harness.start_worker("--pool", pool, settings=STEADY)

    done = harness.wait_status(callback_id, "succeeded", 60)
    handed, lost, quick = done["result"]["results"]
    assert handed == "handed" and quick["value"] == 3
    assert heartq.is_lost_result(lost) and lost["job_id"] == ids[1]
    assert "before saving what the task returned" in lost["reason"]
    app = heartq.App(harness.url)
    try:
        assert app.result(ids[0], timeout=10) == "handed"
        with pytest.raises(heartq.ResultLost, match="its result was lost") as error:
            app.result(ids[1], timeout=10)
        assert error.value.job_id == ids[1]
    finally:
        app.close()
    for job_id in ids[:2]:  # once each, by the killed worker: never run again
        outcomes = [e["outcome"] for e in harness.job(job_id)["executions"]]
        assert outcomes == ["succeeded"], (job_id, outcomes)
    assert harness.job(ids[1])["result_lost"] == lost["reason"]
    assert harness.job(ids[0])["result_lost"] is None


@pytest.mark.parametrize("pool", ["thread", "process"])
def test_a_live_worker_keeps_a_result_saved_past_the_lease_of_its_commit(
    harness: Harness, pool: str
) -> None:
    """The save of what the task returns comes a lease and more after its commit (its code
    runs on after the block, as a completer kept waiting for a pooled connection would
    hold it): the worker beats meanwhile, so neither its own lease reclaimer nor the
    test's, past the lease the attempt had at its commit, gives the result up, and it
    lands. (Before: given up once that lease ran out, `ResultLost` for a worker alive.)"""
    worker = harness.start_worker("--pool", pool, settings=STEADY)
    job_id = harness.store.enqueue([
        NewJob(task="commit_and_wait", args_json=json.dumps({"value": "late"}))
    ])[0]  # fmt: skip
    harness.wait_for(lambda: harness.path(f"committed-{job_id}-1").exists(), 30, "the commit")
    committed = harness.store.clock()
    harness.wait_for(
        lambda: harness.store.clock() > committed + LEASE + 1,
        3 * LEASE,
        "the lease the attempt had at its commit to run out",
    )
    assert harness.store.reclaim_expired("lease_expired") == []  # a reclaimer in contact
    assert harness.store.job_end(job_id).result_pending, harness.job(job_id)["result_lost"]
    beat = harness.worker_row(worker.id)["last_heartbeat_at"]
    assert parse_ts(beat) > committed + LEASE and worker.alive()  # beating all along
    harness.path(f"go-{job_id}").write_text("")
    app = heartq.App(harness.url)
    try:
        assert app.result(job_id, timeout=30) == "late"
    finally:
        app.close()
    done = harness.job(job_id)
    assert (done["status"], done["result"], done["result_lost"]) == ("succeeded", "late", None)
    assert not worker.job_events("lease_lost", job_id)
