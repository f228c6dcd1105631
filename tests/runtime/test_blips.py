"""Saving a result survives a database blip: retried while the lease holds, and never
reported as saved when it was not."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import heartq
from heartq import events
from tests.support import wait_for


def test_result_is_saved_after_the_database_was_locked(tmp_path: Path, run_worker) -> None:
    db = tmp_path / "q.db"
    app = heartq.App(f"sqlite:///{db}?busy_timeout=0.05", heartbeat_interval=0.2, lease=3.0)
    go = threading.Event()
    seen: list[tuple[str, dict]] = []
    app.events.subscribe(lambda event: seen.append((event.name, event.fields)))

    @app.task
    def work() -> str:
        go.wait(10)
        return "done"

    job_id = work.enqueue()
    with run_worker(app, heartbeat_interval=0.2, lease=3.0):
        wait_for(lambda: app.get_job(job_id)["status"] == "running")
        blocker = sqlite3.connect(db, isolation_level=None)
        blocker.execute("BEGIN EXCLUSIVE")
        try:
            go.set()
            wait_for(lambda: any(n == events.COMPLETION_RETRY for n, _ in seen), what="retry")
            assert not any(n == events.JOB_SUCCEEDED for n, _ in seen)  # not claimed as saved
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        wait_for(lambda: any(n == events.JOB_SUCCEEDED for n, _ in seen), what="saved")
    job = app.get_job(job_id)
    assert job["status"] == "succeeded" and job["result"] == "done"
    assert [e["outcome"] for e in job["executions"]] == ["succeeded"]
