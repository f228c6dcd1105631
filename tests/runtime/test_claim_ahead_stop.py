"""A graceful stop gives back the jobs a worker claimed ahead, and says how many it gave
back in `worker_stopped`: those the store found reclaimed already are not counted."""

from __future__ import annotations

import time
from typing import Any

from heartq import events
from heartq.model import DetectedBy
from tests.support import wait_for


def test_a_stop_counts_only_the_buffered_jobs_it_really_gave_back(
    app: Any, run_worker: Any
) -> None:
    @app.task
    def hold(ctx: Any) -> None:
        """Runs until told to stop."""
        deadline = time.monotonic() + 20
        while not ctx.cancelled and time.monotonic() < deadline:
            time.sleep(0.01)

    @app.task
    def quick() -> None:
        """Never runs here: it waits in the buffer."""

    stopped: list[dict[str, Any]] = []

    def hear(event: events.Event) -> None:
        if event.name == events.WORKER_STOPPED:
            stopped.append(event.fields)

    holder = app.enqueue("hold", {}, priority=9)
    ahead = [app.enqueue("quick", {}, priority=5) for _ in range(3)]
    app.events.subscribe(hear)
    try:
        # a slow heartbeat: the worker does not learn of the reclaim before its stop
        with run_worker(
            app, concurrency=1, prefetch=3, heartbeat_interval=5.0, lease=30.0
        ) as worker:
            wait_for(
                lambda: (
                    all(app.get_job(i)["claimed_ahead"] for i in ahead)
                    and app.get_job(holder)["status"] == "running"
                ),
                timeout=15,
                what="one job running, three in the buffer",
            )
            taken = app.store.reclaim_worker(worker.id, DetectedBy.LIVENESS_LOCK, "test")
            assert {r.job_id for r in taken} == {holder, *ahead}
    finally:
        app.events.unsubscribe(hear)
    assert stopped and stopped[-1]["released"] == 0, stopped  # all four were lost
    for job_id in ahead:
        job = app.get_job(job_id)
        assert job["attempts"] == 0 and job["executions"][-1]["outcome"] == "released", job
