"""PostgreSQL's table of job id tails (schema v19): each job's last 8 characters written
once, when the job is inserted, by whatever inserts it, and deleted with the job; never
written again by a claim or a finish (that is what the table is for: the index on jobs
it replaces took an entry per row version). SQLite has no such table: it reads the
primary key's index for a tail."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest

from heartq.errors import AmbiguousJobId, JobNotFound
from heartq.lifecycle.fate import failed, succeeded
from heartq.model import NewJob, Outcome, WorkerInfo
from heartq.store.postgres.store import PostgresStore
from tests.support import opened

from .support import LEASE, SteeredMigrations, insert_version_1_job, new_job


@pytest.fixture
def pg(pg_url: str) -> Iterator[PostgresStore]:
    store = PostgresStore(pg_url)
    store.link.migrate()
    yield store
    store.link.close()


WORKER = WorkerInfo(id="w1", hostname="h", pid=1, queues=("default",), concurrency=10)


def tails(store: PostgresStore) -> set[tuple[str, str]]:
    with store.link.pool.transaction() as conn:
        rows = conn.execute("SELECT tail, job_id FROM job_tails").fetchall()
    return {(row["tail"], row["job_id"]) for row in rows}


def expected(ids: list[str]) -> set[tuple[str, str]]:
    return {(job_id[-8:], job_id) for job_id in ids}


def test_every_way_in_writes_a_tail_once_and_the_job_keeps_it(pg: PostgresStore) -> None:
    """Plain jobs (one statement), a unique job, a job that waits for another (the
    enqueue's transaction): one tail each. Claims, a retry and a finish write none, and
    a tail finds its job."""
    t0 = pg.clock()
    plain = pg.enqueue([new_job() for _ in range(3)], now=t0)
    (unique,) = pg.enqueue([new_job(unique_key="k")], now=t0)
    (waiting,) = pg.enqueue([new_job(depends_on=(plain[0],))], now=t0)
    ids = [*plain, unique, waiting]
    assert tails(pg) == expected(ids)

    pg.register_worker(WORKER)
    first = pg.claim("w1", ["default"], 10, LEASE, now=t0)
    assert pg.finish([failed(job, Outcome.FAILED, "boom") for job in first], now=t0) == []
    again = pg.claim("w1", ["default"], 10, LEASE, now=t0 + 3600)
    assert pg.finish([succeeded(job, "1") for job in again], now=t0 + 3600) == []
    assert tails(pg) == expected(ids)
    for job_id in ids:
        assert pg.resolve_job_id(job_id[-8:].upper()) == job_id
        assert pg.resolve_job_id(job_id.replace("-", "")[-12:]) == job_id


def test_deleted_jobs_take_their_tails_with_them(pg: PostgresStore) -> None:
    """A purge deletes the tails of the jobs it deletes, and only theirs; so does a
    DELETE from a session whose search path is elsewhere (an operator's), since the
    triggers' functions keep the schema they were made in."""
    t0 = pg.clock()
    doomed, kept = pg.enqueue([new_job(max_retries=0), new_job()], now=t0)
    pg.register_worker(WORKER)
    (job,) = pg.claim("w1", ["default"], 1, LEASE, now=t0)
    assert job.id == doomed
    assert pg.finish([failed(job, Outcome.FAILED, "boom")], now=t0) == []
    assert pg.purge_dead_ids() == [doomed]
    assert tails(pg) == expected([kept])
    with pytest.raises(JobNotFound):
        pg.resolve_job_id(doomed[-8:])

    schema = pg.link.schema
    database = pg.link.url.rsplit("?schema=", 1)[0]
    with psycopg.connect(database, autocommit=True) as other:
        assert schema not in str(other.execute("SHOW search_path").fetchone())
        table = psycopg.sql.Identifier(schema, "job_documents")
        jobs = psycopg.sql.SQL("DELETE FROM {}").format(table)
        other.execute(jobs)
    assert tails(pg) == set()


def test_two_jobs_that_share_a_tail_are_both_found_and_ambiguous(pg: PostgresStore) -> None:
    """Tails are not unique: two ids ending alike are two rows, and their tail names
    both (an ambiguity, never one of them picked)."""
    t0 = pg.clock()
    ids = ["00000000-0000-7000-8000-00000000abcd", "11111111-0000-7000-8000-00000000abcd"]
    assert pg.enqueue([NewJob("t", "{}", id=job_id) for job_id in ids], now=t0) == ids
    assert tails(pg) == expected(ids)
    with pytest.raises(AmbiguousJobId):
        pg.resolve_job_id("0000abcd")


def test_the_migration_copies_the_tails_of_the_jobs_already_there(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A queue migrated from schema v18 has a tail for each job it held, and its tail
    index is gone (every migration after it run in its order)."""
    migrations = SteeredMigrations(pg_url, monkeypatch)
    migrations.only(lambda version: version < 19)
    with opened(PostgresStore(pg_url)) as old:
        assert old.link.migrate() == 18
        t0 = old.clock()  # the jobs as v18's enqueue wrote them: today's writes newer tables
        ids = [insert_version_1_job(old, t0, str(uuid.uuid4())) for _ in range(5)]
    migrations.all()
    store = PostgresStore(pg_url)
    try:
        assert store.link.migrate() == migrations.newest
        assert tails(store) == expected(ids)
        assert store.resolve_job_id(ids[2][-8:]) == ids[2]
        with store.link.pool.transaction() as conn:
            index = conn.execute("SELECT to_regclass('jobs_id_tail_idx') AS i").fetchone()
        assert index["i"] is None
    finally:
        store.link.close()
