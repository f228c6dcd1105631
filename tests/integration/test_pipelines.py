"""Pipelines run by real worker processes (docs/design/pipelines.md, "Jobs that wait for jobs"): a
group's callback runs once, after every member, with every result, even when a member's
worker is SIGKILLed mid-run; a chain's step that takes the previous step's result gets
the one its landed attempt saved, never a superseded attempt's."""

from __future__ import annotations

import json
import signal

import pytest

from heartq.ids import new_job_id
from heartq.model import NewJob

from .conftest import STEADY, Harness

pytestmark = pytest.mark.slow


def enqueue_group(harness: Harness, members: list[tuple[str, dict]], label: str) -> list[str]:
    """The members and their callback (`collect`) in one enqueue, as `heartq.group` makes
    them: the callback depends on every member and takes their results."""
    ids = [new_job_id() for _ in members]
    jobs = [
        NewJob(task=task, args_json=json.dumps(args), id=job_id, retry_backoff=0.0)
        for job_id, (task, args) in zip(ids, members, strict=True)
    ]
    callback = NewJob(
        task="collect",
        args_json=json.dumps({"label": label}),
        depends_on=tuple(ids),
        dependency_results=True,
    )
    return harness.store.enqueue([*jobs, callback])


def collected(harness: Harness, callback: str) -> list[str]:
    return sorted(p.name for p in harness.dir.glob(f"collected-{callback}-*"))


def test_a_callback_runs_once_with_every_result_though_a_member_was_killed(
    harness: Harness,
) -> None:
    workers = (harness.start_worker(settings=STEADY), harness.start_worker(settings=STEADY))
    group = [("hold_first", {"seconds": 60}), ("quick", {"value": 1}), ("quick", {"value": 2})]
    *members, callback = enqueue_group(harness, group, "g")
    assert harness.job(callback)["status"] == "waiting"
    harness.wait_for(
        lambda: harness.started_file(members[0], 1).exists(), 15, "the long member to start"
    )
    owner = harness.by_id(harness.job(members[0])["worker_id"])
    other = workers[1] if owner is workers[0] else workers[0]
    assert harness.job(callback)["status"] == "waiting"  # a member still runs
    owner.kill()

    done = harness.wait_status(callback, "succeeded", 30)
    assert [e["outcome"] for e in harness.job(members[0])["executions"]] == [
        "crashed",
        "succeeded",
    ]
    results = done["result"]["results"]
    assert results[0]["execution_id"] == 2 and results[0]["worker_id"] == other.id
    assert [r["value"] for r in results[1:]] == [1, 2]
    assert [r["job_id"] for r in results] == members
    assert len(done["executions"]) == 1 and done["executions"][0]["worker_id"] == other.id
    assert collected(harness, callback) == [f"collected-{callback}-1"]
    started = min(e["started_at"] for e in done["executions"])
    for member in members:  # no dependent ran before its dependencies succeeded
        assert harness.job(member)["finished_at"] <= started


def test_a_process_pool_callback_gets_results_saved_after_the_commit(harness: Harness) -> None:
    """Two members return their results after their commit (saved after it by the
    parent); a third hands its result to the commit in its child (the parent, told so,
    has nothing left to save)."""
    harness.start_worker("--pool", "process", settings=STEADY)
    group = [
        ("commit_then_return", {"value": "a"}),
        ("commit_then_return", {"value": "b"}),
        ("commit_and_wait", {"value": "c", "hand": True, "seconds": 0}),
    ]
    *members, callback = enqueue_group(harness, group, "tx")
    done = harness.wait_status(callback, "succeeded", 60)
    assert done["result"] == {"label": "tx", "results": ["a", "b", "c"]}
    assert collected(harness, callback) == [f"collected-{callback}-1"]
    assert harness.job(members[2])["result_lost"] is None


def test_a_step_takes_the_result_of_the_attempt_that_landed_never_a_superseded_one(
    harness: Harness,
) -> None:
    """A chain's step that takes the previous step's result (`takes_result`, stored as a
    dependency whose one result it takes) reads the result of the attempt whose finish
    landed. The first attempt of the previous step is frozen past its lease, its job
    reclaimed and run again elsewhere; continued, the frozen attempt finishes late with
    its own result, refused. The step runs only after that (its queue has no worker
    until then), and receives the second attempt's result, once."""
    workers = (harness.start_worker(settings=STEADY), harness.start_worker(settings=STEADY))
    first = NewJob(task="hold_first", args_json=json.dumps({"seconds": 1.0}), retry_backoff=0.0)
    (first_id,) = harness.store.enqueue([first])
    step = NewJob(
        task="collect",
        args_json=json.dumps({"label": "chain"}),
        queue="next",
        depends_on=(first_id,),
        dependency_results=True,
        results_of=(first_id,),
        one_result=True,
    )
    (step_id,) = harness.store.enqueue([step])
    harness.wait_for(lambda: harness.started_file(first_id, 1).exists(), 15, "attempt 1")
    stale = harness.by_id(harness.job(first_id)["worker_id"])
    other = workers[1] if stale is workers[0] else workers[0]
    harness.freeze(stale)
    try:
        done = harness.wait_status(first_id, "succeeded", 30)
    finally:
        stale.signal(signal.SIGCONT)
    harness.wait_for(lambda: stale.job_events("lease_lost", first_id), 10, "its lease_lost")
    stale.signal(signal.SIGTERM)  # once it exited, nothing more of it can land
    assert stale.wait_exit(15) == 0
    assert harness.job(step_id)["status"] == "queued"  # released, not yet run

    harness.start_worker("--queues", "next", settings=STEADY)
    ran = harness.wait_status(step_id, "succeeded", 30)
    taken = ran["result"]["results"]
    assert taken == harness.job(first_id)["result"] == done["result"]
    assert taken["worker_id"] == other.id and taken["execution_id"] == 2
    assert [e["outcome"] for e in harness.job(first_id)["executions"]] == ["crashed", "succeeded"]
    assert collected(harness, step_id) == [f"collected-{step_id}-1"]
