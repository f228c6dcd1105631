"""Fixtures of the plan tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from heartq.store.postgres import PostgresStore
from tests import pg_harness


@pytest.fixture
def pg_store(pg_server_url: str) -> Iterator[PostgresStore]:
    """A migrated PostgreSQL store in a schema of its own, closed and dropped after."""
    with pg_harness.schema_url(pg_server_url) as url:
        opened = PostgresStore(url)
        try:
            opened.link.migrate()
            yield opened
        finally:
            opened.link.close()
