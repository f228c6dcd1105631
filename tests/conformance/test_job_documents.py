"""Schema v39 on PostgreSQL (docs/UPGRADING.md, "Schema v39"): the jobs table is renamed
`job_documents` and `jobs` is a view of it. A queue upgraded across it keeps its jobs
and their grants: a role that could read `jobs` still reads it, and the jobs queued
before it run after it."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.sql import SQL, Identifier

from heartq.lifecycle.fate import succeeded
from heartq.store.postgres import PostgresStore
from heartq.store.postgres.connection import parse_url
from tests.support import opened

from .support import LEASE, SteeredMigrations, insert_version_1_job, reader_role, register

RENAME = 39


def test_the_rename_keeps_the_jobs_and_who_may_read_them(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before v39 a reporting role is granted `SELECT` on the table `jobs`; after it, the
    role reads the same row through the view, the table holds it under its new name, and
    the job queued before the upgrade is claimed and finished after it."""
    migrations = SteeredMigrations(pg_url, monkeypatch)
    conninfo, schema = parse_url(pg_url)
    with reader_role(pg_url) as (admin, role):
        with migrations.store_before(RENAME) as old:
            t0 = old.clock()
            ids = [insert_version_1_job(old, t0)]  # today's enqueue writes the new name
            admin.execute(SQL("GRANT USAGE ON SCHEMA {} TO {}").format(
                Identifier(schema), Identifier(role)))  # fmt: skip
            admin.execute(SQL("GRANT SELECT ON {} TO {}").format(
                Identifier(schema, "jobs"), Identifier(role)))  # fmt: skip
        with opened(pg_url) as store:
            assert isinstance(store, PostgresStore)
            assert store.link.migrate() == migrations.newest
            kinds = admin.execute(
                "SELECT relname, relkind FROM pg_class WHERE relnamespace = %s::regnamespace"
                " AND relname IN ('jobs', 'job_documents') ORDER BY relname", [schema]
            ).fetchall()  # fmt: skip
            assert kinds == [("job_documents", "r"), ("jobs", "v")]
            with psycopg.connect(conninfo, user=role) as reader:
                table = Identifier(schema, "jobs")
                read = reader.execute(SQL("SELECT id::text, status FROM {}").format(table))
                assert read.fetchall() == [(ids[0], "queued")]
            register(store, "w1", t0)
            claimed = store.claim("w1", ["default"], 5, LEASE, now=t0 + 1)
            assert [job.id for job in claimed] == ids
            assert store.finish([succeeded(job, None) for job in claimed], now=t0 + 2) == []
            assert {store.get_job(job_id)["status"] for job_id in ids} == {"succeeded"}
