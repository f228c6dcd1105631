"""In-process worker tests: a real queue, a real `Worker` on a background thread,
sub-second settings, and conditions waited on with deadlines.

Backends: the worker is orchestration over the store, whose every operation runs on every
backend in tests/conformance, so a test here runs on the run's first backend (a SQLite
file by default; tests/conftest.py, `LAYER_BACKENDS`), unless it is marked
`on_every_backend`: what the worker or the app does differently by backend (listened
cancels and wake-ups, a caller's own connection, PostgreSQL's pool and row locks).
"""

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


@pytest.fixture
def app(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[heartq.App]:
    """An app on a fresh queue of the current backend."""
    with contextlib.ExitStack() as stack:
        if backend == "postgres":
            schemas = request.getfixturevalue("pg_schemas")
            url = schemas.take()  # migrated ahead
            stack.callback(schemas.drop_behind, url)
        elif backend == "sqlite":
            url = f"sqlite:///{tmp_path / 'q.db'}"
        else:
            raise AssertionError(f"no in-process queue recipe for backend {backend!r}")
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
