"""Heartbeats run apart from task code: a busy task cannot make its own lease lapse."""

from __future__ import annotations

import time

import pytest

import heartq
from tests.support import wait_for

LEASE = 3.0
"""Five times the fast settings' 0.6 s lease: a machine loaded from outside delays the
heartbeat thread, which needs the GIL from the busy task for each of its steps, but a
starved heartbeat thread misses the whole busy spell. Given to the worker itself: the
fast settings `run_worker` passes override the app's, and until the tenth session these
tests set the lease on the app only, so their workers ran on 0.6 s (a 0.5 s trust window)
whatever LEASE said; clean-clone runs saw that lapse once a session (`interrupted` before
the success), raising LEASE twice changed nothing."""
BUSY_FOR = 4.5
"""1.5 leases: a heartbeat the task starves throughout lets the lease lapse (the attempt
ends `interrupted`, measured with a task holding the GIL for the whole spell), a second
and a half before the spell ends. Not longer: the CPU-bound spell burns a core all along
(2 leases did, a core for 6 s)."""

pytestmark = pytest.mark.one_at_a_time("busy-loops")
"""One busy spell at a time: the backends' runs of a test come one after the other, and
`-n 2` ran them at once, each busy loop on one of the 2 cores (a lease lapsed so, once,
under other suites' load)."""


def busy_loop(seconds: float) -> int:
    end, spins = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        spins += 1
    return spins


def test_cpu_bound_thread_task_keeps_its_lease(app: heartq.App, run_worker) -> None:
    @app.task
    def crunch() -> int:
        return busy_loop(BUSY_FOR)

    job_id = crunch.enqueue()
    with run_worker(app, lease=LEASE) as worker:
        assert worker.settings.lease_seconds == LEASE
        wait_for(lambda: app.get_job(job_id)["status"] == "succeeded", timeout=15)
    job = app.get_job(job_id)
    assert [e["outcome"] for e in job["executions"]] == ["succeeded"]


def test_blocking_async_task_keeps_its_lease(app: heartq.App, run_worker) -> None:
    @app.task
    async def blocks_the_loop() -> str:
        time.sleep(BUSY_FOR)  # the mistake heartq must survive: blocking the event loop
        return "ok"

    job_id = blocks_the_loop.enqueue()
    with run_worker(app, pool="async", lease=LEASE) as worker:
        assert worker.settings.lease_seconds == LEASE
        wait_for(lambda: app.get_job(job_id)["status"] == "succeeded", timeout=15)
    assert [e["outcome"] for e in app.get_job(job_id)["executions"]] == ["succeeded"]


@pytest.mark.slow
def test_parent_heartbeats_for_a_silent_child(tmp_path, run_worker, monkeypatch) -> None:
    (tmp_path / "silent_tasks.py").write_text(
        "import heartq, time\n"
        "app = heartq.App()\n"
        "@app.task\n"
        "def quiet():\n"
        f"    time.sleep({BUSY_FOR})\n"
        "    return 'quiet'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import silent_tasks  # type: ignore[import-not-found]

    app = silent_tasks.app
    app.use_url(f"sqlite:///{tmp_path / 'q.db'}")
    job_id = app.enqueue("quiet")
    with run_worker(app, pool="process", app_ref="silent_tasks:app", lease=LEASE) as worker:
        assert worker.settings.lease_seconds == LEASE
        wait_for(lambda: app.get_job(job_id)["status"] == "succeeded", timeout=20)
    job = app.get_job(job_id)
    assert job["result"] == "quiet"
    assert [e["outcome"] for e in job["executions"]] == ["succeeded"]
