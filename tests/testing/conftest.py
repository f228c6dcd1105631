"""heartq.testing tested as a user's suite uses it: an app on a fresh queue (through
`heartq.testing.use_fresh_queue` itself), once per backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import heartq
from heartq.testing import use_fresh_queue
from tests.conftest import BACKENDS


@pytest.fixture(params=BACKENDS)
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[heartq.App]:
    """A new app (no tasks yet) on a fresh queue: a SQLite file, or a new schema on the
    test server, dropped after."""
    server = request.getfixturevalue("pg_server_url") if request.param == "postgres" else None
    made = heartq.App()
    with use_fresh_queue(made, server, tmp_path / "queue"):
        yield made
    made.close()
