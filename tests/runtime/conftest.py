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
from tests.support import FAST

STOP_WITHIN = 2.0
"""The in-process workers' shutdown timeout, seconds (heartq's default is 30): bounds what
a test's end waits for its worker's jobs (`WorkerThread` joins it for 15 s)."""
IN_PROCESS: dict[str, float] = {**FAST, "shutdown_timeout": STOP_WITHIN}
"""`tests.support.FAST`, for a worker on a thread of the test's process."""


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
        application = heartq.App(url, **IN_PROCESS)
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
        return WorkerThread(Worker(app, **{**IN_PROCESS, **options}))

    return make
