"""The command line, run the way a user types it: `python -m heartq ...` in a subprocess.

Every test gets a `heartq` runner (`HeartqCli`) bound to `cli_url`, the URL of a fresh
queue, and to a fresh working directory holding `tasks.py`, the app its workers run.
Tests that arrange a state no command can make use `store`, opened on the same queue.

Backends: SQLite and PostgreSQL by default (`HEARTQ_TEST_CLI_BACKENDS=sqlite` narrows
it); every test runs once per backend, unchanged (PostgreSQL from `tests/pg_harness.py`),
except those marked `without_the_queue`.
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

CLI_BACKENDS = [
    name.strip()
    for name in os.environ.get("HEARTQ_TEST_CLI_BACKENDS", "sqlite,postgres").split(",")
    if name.strip()
]

without_the_queue = pytest.mark.parametrize("cli_url", CLI_BACKENDS[:1], indirect=True)
"""For a test of what commands do without ever opening the test's queue (help, usage
errors, URLs of its own): it runs once, on the first backend selected, since every other
run would be the same commands doing the same thing."""


@pytest.fixture(params=CLI_BACKENDS)
def cli_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of a fresh, empty queue of the current backend."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'q.db'}"  # tmp_path is absolute: sqlite:////tmp/...
        created = open_store(url)  # a queue that exists: read commands refuse a missing file
        created.migrate()
        created.close()
        yield url
    elif request.param == "postgres":
        from tests import pg_harness

        with pg_harness.schema_url(request.getfixturevalue("pg_server_url")) as url:
            yield url
    else:
        raise AssertionError(f"no test queue recipe for backend {request.param!r}")


@pytest.fixture
def store(cli_url: str) -> Iterator[Store]:
    """The test's queue, opened in the test process."""
    opened = open_store(cli_url)
    opened.migrate()
    yield opened
    opened.close()


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
