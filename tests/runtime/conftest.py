"""In-process worker tests: a real SQLite file, a real `Worker` on a background thread,
sub-second settings, and conditions waited on with deadlines."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import heartq
from heartq.worker import Worker

FAST = {
    "heartbeat_interval": 0.1,
    "lease": 0.6,
    "reap_interval": 0.1,
    "liveness_interval": 0.1,
    "poll_interval": 0.02,
    "shutdown_timeout": 2.0,
}


@pytest.fixture(params=["sqlite", "postgres"])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[heartq.App]:
    """An app on a fresh queue, once per backend."""
    with contextlib.ExitStack() as stack:
        if request.param == "postgres":
            schemas = request.getfixturevalue("pg_schemas")
            url = schemas.take()  # migrated ahead
            stack.callback(schemas.drop_behind, url)
        else:
            url = f"sqlite:///{tmp_path / 'q.db'}"
        application = heartq.App(url, **FAST)
        yield application
        application.close()


class WorkerThread:
    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.thread = threading.Thread(target=worker.run, daemon=True)

    def __enter__(self) -> Worker:
        self.thread.start()
        assert self.worker.started.wait(10), "worker did not start"
        return self.worker

    def __exit__(self, *exc: object) -> None:
        self.worker.request_stop()
        self.thread.join(15)
        assert not self.thread.is_alive(), "worker did not stop"


@pytest.fixture
def run_worker() -> Callable[..., WorkerThread]:
    def make(app: heartq.App, **options: Any) -> WorkerThread:
        return WorkerThread(Worker(app, **{**FAST, **options}))

    return make
