"""The deployment id (migration 0009): made once per database (per schema on PostgreSQL),
never changed by a later migrate or another process, and different for every database.
The NATS transport names its stream, subjects and consumers after it (docs/NATS.md,
"Names"), so these are what keep two deployments on one NATS server apart."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from heartq.errors import ConfigError
from heartq.model import JobStatus
from heartq.store import Store, open_store
from tests.support import opened

from .support import SteeredMigrations, insert_version_1_job


def test_made_once_and_kept(store: Store, store_url: str) -> None:
    made = store.link.deployment_id()
    assert re.fullmatch(r"[0-9a-f]{16}", made), made
    store.link.migrate()
    assert store.link.deployment_id() == made
    other = open_store(store_url)
    try:
        assert other.link.migrate() == store.link.migrate()
        assert other.link.deployment_id() == made
    finally:
        other.link.close()


def test_every_database_has_its_own(store_factory: Callable[[], Store]) -> None:
    """Two SQLite files; on PostgreSQL two schemas of one database (two deployments)."""
    made = {store_factory().link.deployment_id() for _ in range(3)}
    assert len(made) == 3


def test_an_upgraded_database_gets_one(
    fresh_url: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database of schema v8 (made by the previous version, jobs in it) gets its id when
    it is migrated, and keeps its jobs."""
    url = fresh_url()
    with SteeredMigrations(url, monkeypatch).store_before(9) as old:
        job_id = insert_version_1_job(old, old.clock())  # today's enqueue writes newer columns
    with opened(url) as upgraded:
        assert upgraded.link.migrate() >= 9
        made = upgraded.link.deployment_id()
        assert re.fullmatch(r"[0-9a-f]{16}", made), made
        assert upgraded.get_job(job_id)["status"] == JobStatus.QUEUED
        assert upgraded.link.migrate() >= 9 and upgraded.link.deployment_id() == made


def test_a_migration_merged_below_the_newest_still_runs(
    fresh_url: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database that took migration N+1 before N existed (two branches merged in either
    order, a hotfix numbered below a released one) gets N when it appears: every version
    not recorded runs, not only those above the newest recorded one."""
    url = fresh_url()
    migrations = SteeredMigrations(url, monkeypatch)
    assert [version for version, _ in migrations.every if version == 9], "no migration 0009"
    migrations.only(lambda version: version != 9)
    with opened(url) as early:
        assert early.link.migrate() == migrations.newest
    migrations.all()
    with opened(url) as later:
        assert later.link.migrate() == migrations.newest
        assert re.fullmatch(r"[0-9a-f]{16}", later.link.deployment_id())  # 0009 made it


def test_a_schema_a_newer_heartq_migrated_is_refused_in_one_line(
    fresh_url: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A heartq older than the schema (a rolling upgrade's old worker starting after the
    new version migrated) is refused at its first call, with one line that names the
    versions, instead of failing statement by statement; the schema is left as it was."""
    url = fresh_url()
    migrations = SteeredMigrations(url, monkeypatch)
    every = migrations.every
    with opened(url) as first:
        assert first.link.migrate() == every[-1][0]
    migrations.only(lambda version: version < every[-1][0])
    with opened(url) as older, pytest.raises(ConfigError) as refused:
        older.link.migrate()
    message = str(refused.value)
    assert "\n" not in message
    assert f"migration {every[-1][0]}," in message and f"(schema {every[-2][0]})" in message
    assert message.endswith("run that version here too (docs/UPGRADING.md)")
    migrations.all()
    with opened(url) as same:
        assert same.link.migrate() == every[-1][0]  # nothing changed: the current one carries on
