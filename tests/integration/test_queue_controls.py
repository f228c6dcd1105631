"""Queues controlled while their workers run (`heartq queues pause|resume|scale`,
`App.pause_queue` and its kin): real worker processes, the command line, both backends.

A pause reaches three running workers within about a second (the production pace: a
1 s pulse), nothing of the queue starts while it is paused, the jobs that were running
finish (none reclaimed), a worker started while it is paused obeys from its first claim,
and a resume lets the queued jobs run. A scale from a worker's 10 slots to 2 holds its
running jobs of the queue at 2, and back lets them fill the slots again."""

from __future__ import annotations

import json
import signal
import time
from typing import Any

import heartq
from heartq.model import NewJob
from tests.conftest import on_every_backend

from .conftest import STEADY, Harness, WorkerProc, parse_ts
from .test_nats_transport import transport_url  # noqa: F401 - the fixture

ONE_SECOND_PULSE = {**STEADY, "--heartbeat-interval": "1"}
"""STEADY's 4 s lease, at the production pace of queue controls: a pulse of 1 s (the
pulse is never longer than the heartbeat interval, FAST's 0.2 s)."""
SEEN_WITHIN = 2.5
"""A pulse is 1 s; the rest is a loaded 2-core machine's slack."""


def _seen(worker: WorkerProc, **match: Any) -> list[dict[str, Any]]:
    return worker.events("queue_control_seen", queue="default", **match)


def _statuses(harness: Harness, ids: list[str]) -> dict[str, str]:
    return {i: harness.store.get_job(i)["status"] for i in ids}


@on_every_backend  # PostgreSQL's claim of a queue subset is another statement
def test_a_pause_reaches_every_worker_holds_across_a_restart_and_resumes(
    harness: Harness,
) -> None:
    workers = [
        harness.start_worker("--concurrency", "2", settings=ONE_SECOND_PULSE) for _ in range(3)
    ]
    held = harness.store.enqueue(
        [NewJob("hold", json.dumps({"seconds": 2.5}), max_retries=0) for _ in range(3)]
    )
    harness.wait_for(
        lambda: set(_statuses(harness, held).values()) == {"running"}, 30, "the held jobs to run"
    )

    paused = json.loads(harness.heartq("queues", "pause", "default", "--json"))
    assert paused["paused"] is True
    paused_at = paused["changed_at"]  # stored: the database's clock, this machine's
    for worker in workers:
        (seen,) = harness.wait_for(lambda w=worker: _seen(w, paused=True), 10, "the pause seen")
        assert parse_ts(seen["ts"]) - paused_at < SEEN_WITHIN, seen
    waiting = harness.store.enqueue([NewJob("quick", "{}", max_retries=0) for _ in range(10)])

    harness.wait_for(
        lambda: set(_statuses(harness, held).values()) == {"succeeded"},
        30,
        "the jobs that ran before the pause to finish",
    )
    assert set(_statuses(harness, waiting).values()) == {"queued"}
    assert not any((harness.dir / f"started-{i}-1").exists() for i in waiting)
    for job_id in held:
        assert harness.store.get_job(job_id)["attempts"] == 1
    assert not any(w.events("job_reclaimed") for w in workers), "a pause reclaims nothing"

    workers[0].signal(signal.SIGTERM)
    assert workers[0].wait_exit(30) == 0
    restarted = harness.start_worker("--concurrency", "2", settings=ONE_SECOND_PULSE)
    harness.wait_for(lambda: _seen(restarted, paused=True), 10, "the new worker to know")
    harness.wait_for(
        lambda: restarted.events("heartbeat"), 10, "the new worker to claim for a while"
    )
    assert set(_statuses(harness, waiting).values()) == {"queued"}

    assert "active" in harness.heartq("queues", "resume", "default")
    harness.wait_for(
        lambda: set(_statuses(harness, waiting).values()) == {"succeeded"},
        30,
        "the queued jobs to run once resumed",
    )
    shown = json.loads(harness.heartq("queues", "--json"))
    assert [(q["queue"], q["paused"]) for q in shown] == [("default", False)]


def _running(harness: Harness) -> int:
    table = "jobs" if harness.backend == "postgres" else "heartq_jobs"
    ((n,),) = harness.sql(f"SELECT count(*) FROM {table} WHERE status = 'running'")
    return int(n)


def test_a_scale_caps_a_worker_s_share_of_the_queue_and_lifts(harness: Harness) -> None:
    app = heartq.App(harness.url)
    try:
        worker = harness.start_worker("--concurrency", "10", settings=STEADY)
        app.scale_queue("default", 2)
        harness.wait_for(lambda: _seen(worker, concurrency=2), 10, "the scale to 2 seen")
        hold = json.dumps({"seconds": 0.4})
        ids = harness.store.enqueue([NewJob("hold", hold, max_retries=0) for _ in range(20)])

        most = 0
        deadline = time.monotonic() + 60
        while sum(s == "succeeded" for s in _statuses(harness, ids).values()) < 6:
            most = max(most, _running(harness))
            assert time.monotonic() < deadline, "six jobs did not end two at a time"
            time.sleep(0.02)  # sampling leaves the worker the cores
        assert most == 2, most

        app.scale_queue("default", None)
        harness.wait_for(lambda: _seen(worker, concurrency=None), 10, "the cap lifted")
        most = 0
        deadline = time.monotonic() + 60
        while set(_statuses(harness, ids).values()) != {"succeeded"}:
            most = max(most, _running(harness))
            assert time.monotonic() < deadline, "the jobs did not end once the cap lifted"
            time.sleep(0.02)
        assert most >= 5, f"at most {most} ran at once with the cap lifted"
    finally:
        app.close()


def test_a_paused_queue_s_jobs_wait_in_the_stream_while_its_other_queues_run(
    harness: Harness,
    transport_url: str,  # noqa: F811 - the fixture imported above
) -> None:
    """Through NATS JetStream: the worker fetches nothing of a paused queue (its database
    claim obeys too), while its other queue's jobs run; resumed, the job runs."""
    worker = harness.start_worker(
        "--transport", transport_url, "--queues", "default,other", settings=STEADY
    )
    app = heartq.App(harness.url, transport=transport_url)
    try:
        app.pause_queue("default")
        harness.wait_for(lambda: _seen(worker, paused=True), 10, "the pause seen")
        waiting = app.enqueue("quick", {})
        ran = app.enqueue("quick", {}, queue="other")
        assert app.result(ran, timeout=30)["job_id"] == ran
        assert harness.store.get_job(waiting)["status"] == "queued"
        app.resume_queue("default")
        assert app.result(waiting, timeout=30)["job_id"] == waiting
    finally:
        app.close()
