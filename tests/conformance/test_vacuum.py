"""The jobs table's light vacuum between autovacuum's runs (`Administrator.vacuum_jobs`,
`maintenance/pruner.py`'s `JobsVacuum`): on PostgreSQL the space of finished jobs' dead
row versions is reused by the next jobs instead of extending the table, the vacuum
never waits for a lock, and it spreads out while its passes take long."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import psycopg
import pytest
from psycopg.sql import SQL, Identifier

from heartq.config import Settings
from heartq.event_stream import EventStream
from heartq.lifecycle.fate import succeeded
from heartq.maintenance.pruner import VACUUM_SHARE, JobsVacuum
from heartq.maintenance.runner import default_services
from heartq.model import NewJob
from heartq.store import Store
from heartq.store.postgres import PostgresStore
from heartq.store.postgres.connection import parse_url
from heartq.store.postgres.queries import admin as admin_queries


def _vacuums(store: PostgresStore) -> int:
    """How many vacuums of the jobs table PostgreSQL counted (reported as each ends)."""
    with store.link.pool.autocommit() as conn:
        row = conn.execute(
            "SELECT vacuum_count FROM pg_stat_user_tables WHERE relid = 'job_documents'::regclass"
        ).fetchone()
    assert row is not None
    return int(row["vacuum_count"])


def test_a_vacuum_pass_vacuums_the_jobs_table(store: Store) -> None:
    """On PostgreSQL a pass is one vacuum of the jobs table. What it is for (the next
    jobs' rows reuse the space of the finished jobs' dead versions) depends on the
    server's horizon, which other sessions of a shared server hold: measured instead,
    BENCHMARKS.md, "Storage a finished job"."""
    if not isinstance(store, PostgresStore):
        assert store.vacuum_jobs() is False  # SQLite: nothing kept to vacuum
        return
    with store.link.pool.autocommit() as conn:  # no autovacuum to skip this one's table
        conn.execute("ALTER TABLE job_documents SET (autovacuum_enabled = off)")
    store.enqueue([NewJob("t", "{}")])
    (job,) = store.claim("w", ["default"], 1, lease=60)
    assert store.finish([succeeded(job, None)]) == []
    before = _vacuums(store)
    assert store.vacuum_jobs() is True
    assert _vacuums(store) == before + 1
    assert store.vacuum_jobs(since=3600) is False  # one an interval, whoever ran it
    assert _vacuums(store) == before + 1


def test_a_role_that_may_not_vacuum_the_jobs_table_does_not_try(store: Store) -> None:
    """A worker connected as a role without the owner's privileges would get a warning
    from PostgreSQL at every pass: for it, no vacuum is ever due."""
    if not isinstance(store, PostgresStore):
        pytest.skip("SQLite has no vacuum")
    name = f"heartq_user_{uuid.uuid4().hex[:8]}"
    role = Identifier(name)
    conninfo, schema = parse_url(store.dialect.url)
    with psycopg.connect(conninfo, autocommit=True) as admin:
        admin.execute(SQL("CREATE ROLE {} LOGIN").format(role))
        try:
            admin.execute(SQL("GRANT USAGE ON SCHEMA {} TO {}").format(Identifier(schema), role))
            table = Identifier(schema, "job_documents")
            admin.execute(SQL("GRANT ALL ON {} TO {}").format(table, role))
            with psycopg.connect(conninfo, user=name) as conn:
                conn.execute(SQL("SET search_path TO {}").format(Identifier(schema)))
                row = conn.execute(admin_queries.VACUUM_DUE, {"since": 0.0}).fetchone()
        finally:
            admin.execute(SQL("DROP OWNED BY {}").format(role))
            admin.execute(SQL("DROP ROLE {}").format(role))
    assert row == (False,)
    assert store.vacuum_jobs() is True  # the owner's (the test's role) is due


def test_a_vacuum_never_waits_for_a_lock(store: Store) -> None:
    """While another session holds a lock a vacuum needs (autovacuum's, another worker's
    vacuum), the pass skips the table at once instead of holding up the worker's other
    maintenance."""
    if not isinstance(store, PostgresStore):
        pytest.skip("SQLite has no vacuum to wait")
    store.enqueue([NewJob("t", "{}")])
    conninfo, schema = parse_url(store.dialect.url)
    with psycopg.connect(conninfo) as holder:
        holder.execute(SQL("SET search_path TO {}").format(Identifier(schema)))
        holder.execute("LOCK TABLE jobs IN SHARE UPDATE EXCLUSIVE MODE")
        done = threading.Event()
        failure: list[BaseException] = []

        def vacuum() -> None:
            try:
                store.vacuum_jobs()
            except Exception as error:  # noqa: BLE001 - reported by the test's thread
                failure.append(error)
            done.set()

        threading.Thread(target=vacuum, daemon=True).start()
        waited = done.wait(30)
        holder.rollback()
    assert waited, "the vacuum waited for the lock"
    assert not failure, failure


class _TimedAdministrator:
    """A store whose vacuum takes `seconds` of the vacuum's clock."""

    def __init__(self, clock: list[float], seconds: float) -> None:
        self.clock, self.seconds = clock, seconds

    def vacuum_jobs(self, since: float = 0.0) -> bool:
        self.clock[0] += self.seconds
        return True

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(name)


def test_a_long_pass_spreads_the_next_ones_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass of 2 s (a held horizon: nothing removable, every page since read again)
    puts the next one `VACUUM_SHARE` times that later; a quick pass brings the interval
    back to the setting."""
    clock = [1000.0]
    monkeypatch.setattr("heartq.maintenance.pruner.time.monotonic", lambda: clock[0])
    slow = _TimedAdministrator(clock, 2.0)
    service = JobsVacuum(slow, 5.0)
    service.run_once()
    assert service.interval == VACUUM_SHARE * 2.0
    slow.seconds = 0.01
    service.run_once()
    assert service.interval == 5.0


@pytest.mark.parametrize("interval", [5.0, 0.0])
def test_the_vacuum_runs_unless_set_to_zero(store: Store, interval: float) -> None:
    services = default_services(store, Settings(vacuum_interval=interval), "w", EventStream())
    names = [service.name for service in services]
    assert ("vacuum" in names) == (interval > 0), names
