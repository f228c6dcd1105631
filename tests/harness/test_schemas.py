"""The PostgreSQL schemas tests are handed (`tests/pg_harness.SchemaStock`): each made
ahead of its test (a copy of one the migrations made, `tests/pg_template.py`: the same
schema), never handed out twice, dropped behind it, and none left when the stock closes;
and one schema handed out again and again, emptied (`EmptiedSchema`), as its migration
left it each time."""

from __future__ import annotations

import contextlib

import psycopg
import pytest
from psycopg import sql

from heartq.lifecycle.fate import failed, succeeded
from heartq.model import Outcome, TaskPolicy
from heartq.periodic import Schedule
from heartq.store import open_store
from heartq.store.postgres.dialect import PostgresDialect
from heartq.store.sql.base import migration_scripts
from tests import pg_harness, pg_template
from tests.conformance.support import claim_one, enqueue_one, new_job, register
from tests.conformance.test_periodic import tick
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


def _columns(base: str, schema: str) -> list[tuple[str, int, bool]]:
    """Every column slot of `schema`'s relations, a dropped column's among them (pg_dump
    writes none of those): `(relation, number, dropped)`."""
    with psycopg.connect(base) as conn:
        rows = conn.execute(
            "SELECT c.relname, a.attnum, a.attisdropped FROM pg_attribute a"
            " JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND a.attnum > 0 ORDER BY 1, 2",
            (schema,),
        )
        return [(str(r), int(n), bool(d)) for r, n, d in rows]


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
                newest = store.dialect.migrations()[-1][0]  # type: ignore[attr-defined]
                assert store.link.migrate() == newest  # up to date already
                assert store.list_jobs() == [] and store.list_workers(include_all=True) == []
            finally:
                store.link.close()
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
    """Some tests make the dialect class return only the first migrations (to test an
    upgrade), while the stock's thread makes schemas for the tests after them."""
    monkeypatch.setattr(PostgresDialect, "migrations", lambda self: [])
    stock = pg_harness.SchemaStock(pg_server_url, ahead=1)
    try:
        wait_for(lambda: stock.ready(), 30, "a schema made ahead")
        url = stock.take()
        assert _exists(pg_server_url, url, "jobs") and _exists(pg_server_url, url, "deployment")
    finally:
        stock.close()


def test_an_emptied_schema_is_as_its_migration_left_it(
    pg_server_url: str, pg_schemas: pg_harness.SchemaStock
) -> None:
    """`EmptiedSchema.empty()`, after a store wrote in every table the migration left
    empty (and moved a sequence of the schema), puts back exactly what the migration
    left: every table's rows, the deployment id among them, and every sequence's
    position; a store opened on it then finds an empty queue. A new table a migration
    adds must be written here too (the test says which is not)."""
    url = pg_schemas.take()
    schema = url.rsplit("?schema=", 1)[1]
    with psycopg.connect(pg_server_url, autocommit=True) as conn:  # one of the test's own
        conn.execute(sql.SQL("CREATE SEQUENCE {}.counter").format(sql.Identifier(schema)))
    emptied = pg_harness.EmptiedSchema(url)
    store = open_store(url)
    try:
        deployment = store.link.deployment_id()
        t0 = 1_000_000_000.0
        register(store, "w1", t0)
        enqueue_one(store, t0)  # run, then pruned: its id is kept in pruned_successes
        assert store.finish([succeeded(claim_one(store, "w1", t0), "0")], now=t0 + 1) == []
        store.prune(3600.0, 0.0, now=t0 + 2)
        store.declare_tasks([TaskPolicy("crunch", "default", 0, 1, 0.5, 10.0)], "w1", now=t0)
        first = enqueue_one(store, t0, task="crunch")
        enqueue_one(store, t0, depends_on=(first,))
        every = Schedule(name="beat", task="beat", every=10)
        tick(store, every, t0 + 1)
        store.set_queue_control("q", paused=True, scale=False, concurrency=None, by="op")
        retried = claim_one(store, "w1", t0 + 20)  # a failed attempt: its execution row
        assert store.finish([failed(retried, Outcome.FAILED, "boom")], now=t0 + 21) == []
        enqueue_one(store, t0, queue="done")  # a success of the ready log: its end row
        done = claim_one(store, "w1", t0 + 22, queues=("done",))
        assert store.finish([succeeded(done, "0")], now=t0 + 23) == []
        # two fairness keys' jobs taken in one claim: where the turns stand (claim_turns)
        store.enqueue([new_job(queue="fair", fair_key=key) for key in "ab"], now=t0)
        assert len(store.claim("w1", ["fair"], 2, 30.0, now=t0 + 22)) == 2  # leases held
        enqueue_one(store, t0, queue="later")  # left queued: its entry of the ready log
        with psycopg.connect(pg_server_url, autocommit=True) as conn:
            conn.execute("SELECT nextval(%s)", (f"{schema}.counter",))
        written = emptied.contents()
        assert [t for t, rows in emptied.migrated.items() if not rows and not written[t]] == []
        assert written != emptied.migrated
    finally:
        store.link.close()
    try:
        assert emptied.empty() == url
        assert emptied.contents() == emptied.migrated
        again = open_store(url)
        try:
            assert again.link.migrate() == again.dialect.migrations()[-1][0]
            assert again.list_jobs() == [] and again.list_workers(include_all=True) == []
            assert again.list_schedules() == [] and again.task_policies() == {}
            assert again.link.deployment_id() == deployment
        finally:
            again.link.close()
    finally:
        emptied.close()
        pg_schemas.drop_behind(url)


def test_a_copied_schema_is_the_schema_a_migration_makes(pg_server_url: str) -> None:
    """`pg_template.Template.copy` makes what the migrations make: every catalog object
    as pg_dump writes it (names aside), every table's rows, and a deployment id of its
    own (each copy names a deployment, as each migrated schema does). A migration whose
    result a copy misses (rows it writes, a dropped column's slot) fails here."""
    with contextlib.ExitStack() as made:
        urls = [made.enter_context(pg_harness.schema_url(pg_server_url)) for _ in range(4)]
        template_url, migrated_url, *copies = urls
        for url in (template_url, migrated_url):
            store = open_store(url)
            store.link.migrate()
            store.link.close()
        scripts = migration_scripts("heartq.store.postgres")
        template = pg_template.Template.made(template_url, scripts)
        assert template is not None, "no pg_dump here: every schema is migrated"
        for url in copies:
            template.copy(url)
        names = [url.rsplit("?schema=", 1)[1] for url in urls]
        ddl = {
            url: (pg_template._dump(url) or "").replace(name, "SCHEMA")
            for url, name in zip(urls, names, strict=True)
        }
        assert ddl[copies[0]] == ddl[migrated_url] == ddl[copies[1]]
        assert "CREATE TABLE SCHEMA.job_documents" in ddl[migrated_url]
        slots = {url: _columns(pg_server_url, name) for url, name in zip(urls, names, strict=True)}
        assert slots[copies[0]] == slots[migrated_url] == slots[copies[1]]  # dropped ones too
        contents = {}
        for url in urls[1:]:
            emptied = pg_harness.EmptiedSchema(url)
            try:
                contents[url] = emptied.contents()
            finally:
                emptied.close()
        ids = [rows.pop("deployment") for rows in contents.values()]
        assert len({row[0] for rows in ids for row in rows}) == 3  # one each
        for rows in contents.values():  # the versions, not when each schema took them
            rows["schema_migrations"] = [row[:1] for row in rows["schema_migrations"]]
        assert contents[copies[0]] == contents[migrated_url] == contents[copies[1]]
        assert sorted(v for (v,) in contents[migrated_url]["schema_migrations"]) == [
            v for v, _ in scripts
        ]
        for url in copies:
            store = open_store(url)
            try:
                assert store.link.migrate() == scripts[-1][0]  # up to date: read only
                assert store.list_jobs() == []
            finally:
                store.link.close()
