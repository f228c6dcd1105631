"""The PostgreSQL schemas tests are handed (`tests/pg_harness.SchemaStock`): each made by
a migration of its own ahead of its test, never handed out twice, dropped behind it, and
none left when the stock closes."""

from __future__ import annotations

import psycopg
import pytest

from heartq.store import open_store
from heartq.store.postgres.store import PostgresStore
from tests import pg_harness
from tests.support import wait_for


def _exists(base: str, url: str, table: str | None = None) -> bool:
    """Whether `url`'s schema (or its `table`) exists on `base`."""
    schema = url.rsplit("?schema=", 1)[1]
    with psycopg.connect(base) as conn:
        if table is not None:
            found = conn.execute("SELECT to_regclass(%s)", (f"{schema}.{table}",)).fetchone()
            return found is not None and found[0] is not None
        found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
        return found.fetchone() is not None


def test_each_schema_is_fresh_migrated_and_dropped_behind(pg_server_url: str) -> None:
    stock = pg_harness.SchemaStock(pg_server_url, ahead=2)
    try:
        wait_for(lambda: len(stock.ready()) == 2, 30, "two schemas made ahead")
        taken = [stock.take() for _ in range(4)]  # two ready, two made on the spot
        assert len(set(taken)) == 4
        for url in taken:
            assert _exists(pg_server_url, url, "schema_migrations")  # before any store opens
            store = open_store(url)
            try:
                assert store.migrate() == store.migrations()[-1][0]  # up to date already
                assert store.list_jobs() == [] and store.list_workers(include_all=True) == []
            finally:
                store.close()
        stock.drop_behind(taken[0])
        wait_for(lambda: not _exists(pg_server_url, taken[0]), 30, "the drop behind")
        wait_for(lambda: len(stock.ready()) == 2, 30, "two more made ahead")
        left = [*stock.ready(), *taken[1:]]
        for url in taken[1:]:
            stock.drop_behind(url)
    finally:
        stock.close()
    assert not [url for url in left if _exists(pg_server_url, url)]


def test_a_test_that_patches_the_migrations_meanwhile_changes_no_schema_made_ahead(
    pg_server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some tests make the store class return only the first migrations (to test an
    upgrade), while the stock's thread makes schemas for the tests after them."""
    monkeypatch.setattr(PostgresStore, "migrations", lambda self: [])
    stock = pg_harness.SchemaStock(pg_server_url, ahead=1)
    try:
        wait_for(lambda: stock.ready(), 30, "a schema made ahead")
        url = stock.take()
        assert _exists(pg_server_url, url, "jobs") and _exists(pg_server_url, url, "deployment")
    finally:
        stock.close()
