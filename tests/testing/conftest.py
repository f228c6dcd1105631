"""heartq.testing tested as a user's suite uses it: an app on a fresh queue (through
`heartq.testing.use_fresh_queue` itself). A layer over the store (tests/conftest.py,
`LAYERS`): on the run's first backend, and on every backend where it differs by backend
(`on_every_backend`: a task's or a caller's own transaction, a wait on another worker);
`use_fresh_queue` itself on both in test_plugin.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import heartq
from heartq.testing import use_fresh_queue


@pytest.fixture
def app(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[heartq.App]:
    """A new app (no tasks yet) on a fresh queue: a SQLite file, or a new schema on the
    test server, dropped after."""
    server = request.getfixturevalue("pg_server_url") if backend == "postgres" else None
    made = heartq.App()
    with use_fresh_queue(made, server, tmp_path / "queue"):
        yield made
    made.close()
