"""A claim the database forgot, repeated to the worker that made it: two attempts of one
worker never share a fencing key (docs/design/database-bad-days.md, "A failover that forgets a
claim").

A database that forgets a claim issues its execution id again (PostgreSQL: a failover
to an asynchronous standby, tests/integration/test_failover_fencing.py). Here SQLite's
history is rolled back the way an operator's restore of a backup does it: the queue's
file is copied before the claim and copied back while the attempt runs (SQLite's backup
API, under the worker's open connections). The same worker then claims the job again
under the same execution id, while its first attempt's code still runs: the worker's id
in the fence cannot tell the two apart, so the worker gives the repeated claim back
unstarted, and the job runs under the next execution id.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import heartq
from heartq import events
from tests.runtime.conftest import IN_PROCESS, WorkerThread
from tests.support import wait_for


def copy_database(source: Path, target: Path) -> None:
    """`source` copied whole into `target` (SQLite's backup API, page by page under
    the database's own locks: a live queue file may be either)."""
    with (
        contextlib.closing(sqlite3.connect(source)) as src,
        contextlib.closing(sqlite3.connect(target)) as dst,
    ):
        src.backup(dst)


def test_a_repeated_claim_of_a_running_attempt_is_given_back_unstarted(
    tmp_path: Path, run_worker: Callable[..., WorkerThread], caplog: pytest.LogCaptureFixture
) -> None:
    queue, snapshot = tmp_path / "q.db", tmp_path / "snapshot.db"
    app = heartq.App(f"sqlite:///{queue}", **IN_PROCESS)
    gate = threading.Event()
    ran: list[int] = []

    @app.task(max_retries=0)
    def remembers(ctx: heartq.JobContext) -> int:
        ran.append(ctx.execution_id)
        if ctx.execution_id == 1:
            gate.wait(20)  # the first attempt's code runs on (a thread cannot be killed)
        return ctx.execution_id

    caplog.set_level(logging.WARNING, logger="heartq")
    try:
        with run_worker(app, concurrency=2):
            job_id = remembers.options(delay=0.5).enqueue()  # queued before the snapshot
            copy_database(queue, snapshot)
            wait_for(lambda: ran == [1], what="the first attempt to run")
            copy_database(snapshot, queue)  # the claim is forgotten: queued, execution 0

            wait_for(lambda: len(ran) == 2, timeout=15, what="the job to run again")
            assert ran == [1, 2]  # the repeated execution id 1 never ran a second time
            wait_for(lambda: app.get_job(job_id)["status"] == "succeeded", timeout=15)
            gate.set()
        job = app.get_job(job_id)
    finally:
        gate.set()
        app.close()

    assert job["result"] == 2
    history = [(e["execution_id"], e["outcome"]) for e in job["executions"]]
    assert history == [(1, "released"), (2, "succeeded")]
    repeated = [
        r.heartq_fields for r in caplog.records if r.getMessage() == events.CLAIM_REPEATED
    ]
    assert [(f["job_id"], f["execution_id"]) for f in repeated] == [(job_id, 1)], json.dumps(
        repeated
    )
