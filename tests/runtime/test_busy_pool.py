"""A task that declared `heartbeat_timeout` is not silent while it waits on the store.

Over a slow link a worker's pool stays busy, and a task waits seconds for a connection
(its `ctx.transaction()`), or its outcome waits for the completer's connection after its
code ended. Counted as silence, that wait stopped the worker renewing a live attempt: its
lease ran out, another worker's reaper reclaimed the job, the attempt's commit or finish
was refused, and a job whose code had succeeded ran again. Here the worker's one pooled
connection (`pool_size=1`) is held by the test for longer than the lease while the task
waits for it, and a second worker, on another queue and another pool, reaps: the job
must succeed once. PostgreSQL: on SQLite a busy store is the file's write lock, which
holds up the heartbeat too (the self-fencing tests cover that).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import heartq
from heartq.context import JobContext
from tests.conftest import only_on
from tests.support import wait_for

from .conftest import WorkerThread

SETTINGS = {"heartbeat_interval": 0.1, "lease": 1.2, "reclaim_interval": 0.1}
"""Trust window 1.0 s, lease 1.2 s: the test holds the pool for longer than both."""
HOLD = 2.5
"""Seconds the test keeps the worker's one pooled connection: past the lease, within
the pool's timeout (5 s)."""
SILENCE = 0.3
"""The task's `heartbeat_timeout`: far shorter than the wait."""


@only_on("postgres")  # SQLite's busy store is its write lock
@pytest.mark.parametrize("waits", ["in_its_transaction", "for_its_outcome"])
def test_a_task_waiting_on_a_busy_pool_is_not_silent(
    app: heartq.App, run_worker: Callable[..., WorkerThread], waits: str
) -> None:
    started = threading.Event()
    go = threading.Event()

    @app.task(heartbeat_timeout=SILENCE)
    def patient(ctx: JobContext) -> dict[str, Any]:
        started.set()
        while not go.wait(0.05):
            ctx.heartbeat()  # in contact until the test holds the pool
        if waits == "in_its_transaction":
            with ctx.transaction():
                pass
        return {"execution_id": ctx.execution_id}

    reaper_app = heartq.App(app.store.link.url)
    try:
        with (
            run_worker(app, pool_size=1, **SETTINGS),
            run_worker(reaper_app, queues=["elsewhere"], **SETTINGS),
        ):
            job_id = patient.enqueue()
            assert started.wait(15), "the task did not start"
            with app.store.link.pool.transaction() as conn:  # the worker's only connection
                conn.execute("SELECT 1")
                go.set()
                time.sleep(HOLD)  # the busy pool: the test's load, not a wait for a result
            job = wait_for(  # succeeded, and its result saved (after its transaction)
                lambda: (j := app.store.get_job(job_id))["result"] is not None and j,
                15,
                "the job's result",
            )
    finally:
        reaper_app.close()
    assert [e["execution_id"] for e in job["executions"]] == [1], job["executions"]
    assert job["result"] == {"execution_id": 1}
