"""Fixtures of the plan tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from heartq.store.postgres import PostgresStore


@pytest.fixture
def pg_store(pg_schemas: Any) -> Iterator[PostgresStore]:
    """A migrated PostgreSQL store in a schema of its own (`pg_schemas`: made ahead of the
    test), closed after and dropped behind."""
    url = str(pg_schemas.take())
    try:
        opened = PostgresStore(url)
        try:
            opened.link.migrate()  # up to date already: read, not written
            yield opened
        finally:
            opened.link.close()
    finally:
        pg_schemas.drop_behind(url)
