"""The command line, run the way a user types it: the entry point with the argv typed, in
the test's process, or `python -m heartq ...` in a subprocess for what only a process
shows (workers, the dashboard, the demo, a terminal, signals: tests/cli/helpers.py).

Every test gets a `heartq` runner (`HeartqCli`) bound to `cli_url`, the URL of a fresh
queue, and to a fresh working directory holding `tasks.py`, the app its workers run.
Tests that arrange a state no command can make use `store`, opened on the same queue.

Backends: the command line is presentation over the store, and the store's every
operation runs on both backends in tests/conformance; so a test here runs on the first
backend of the run (SQLite by default; tests/conftest.py, `LAYER_BACKENDS`), unless it is
marked `on_every_backend`: what a command does differently by backend (URLs and their
errors, settings read for one backend only, the liveness lock a read command probes).
`HEARTQ_TEST_LAYER_BACKENDS=sqlite,postgres` runs every test on both, unchanged
(PostgreSQL from `tests/pg_harness.py`), except those marked `without_the_queue`.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from heartq.store import Store, open_store
from tests.cli.helpers import TASKS_SOURCE, HeartqCli
from tests.conftest import LAYER_BACKENDS

without_the_queue = pytest.mark.parametrize("backend", LAYER_BACKENDS[:1])
"""For a test of commands that never open the test's queue (help, usage errors, URLs of
their own or none): it runs once, on the first backend selected, since every other run
would be the same commands doing the same thing."""


@pytest.fixture
def cli_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of a fresh, empty queue of the current backend, migrated (a queue that
    exists: read commands refuse a missing SQLite file)."""
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'q.db'}"  # tmp_path is absolute: sqlite:////tmp/...
        created = open_store(url)
        created.link.migrate()
        created.link.close()
        yield url
    elif backend == "postgres":
        schemas = request.getfixturevalue("pg_schemas")
        url = schemas.take()  # migrated ahead
        yield url
        schemas.drop_behind(url)
    else:
        raise AssertionError(f"no test queue recipe for backend {backend!r}")


@pytest.fixture
def store(cli_url: str) -> Iterator[Store]:
    """The test's queue, opened in the test process."""
    opened = open_store(cli_url)
    opened.link.migrate()
    yield opened
    opened.link.close()


@pytest.fixture
def heartq(cli_url: str, tmp_path: Path) -> Iterator[HeartqCli]:
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "tasks.py").write_text(TASKS_SOURCE)
    runner = HeartqCli(cli_url, workdir)
    yield runner
    runner.close()


@pytest.fixture
def workers(heartq: HeartqCli) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Long-running workers a test starts; killed (with their children) at teardown."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            proc.wait(timeout=10)
