"""A shortened job id's tail on PostgreSQL (schema v42): the last 8 characters of each
job's id, indexed on its document (`job_documents_tail_idx`), so a tail finds its job in
one probe whatever the job has become since (running on its lease, ended on an end row,
written again by a retry), and a deleted job's tail finds nothing. SQLite reads the
primary key's index for a tail (its own tests)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from heartq.errors import AmbiguousJobId, JobNotFound
from heartq.lifecycle.fate import failed, succeeded
from heartq.model import JobStatus, NewJob, Outcome, WorkerInfo
from heartq.store.postgres import queries as pg_q
from heartq.store.postgres.store import PostgresStore
from tests.support import opened

from .support import LEASE, SteeredMigrations, new_job


@pytest.fixture
def pg(pg_url: str) -> Iterator[PostgresStore]:
    store = PostgresStore(pg_url)
    with opened(store):
        store.link.migrate()
        yield store


WORKER = WorkerInfo(id="w1", hostname="h", pid=1, queues=("default",), concurrency=10)


def found(store: PostgresStore, job_id: str) -> list[tuple[str, str]]:
    """What the tail lookup answers for `job_id`'s last 12 characters: (id, status)."""
    params = {"tail": job_id[-8:], "suffix": job_id[-12:], "n": 12, "limit": 6}
    with store.link.pool.transaction() as conn:
        rows = conn.execute(pg_q.JOBS_BY_SUFFIX, params).fetchall()
    return [(row["id"], row["status"]) for row in rows]


def test_a_tail_finds_its_job_whatever_it_has_become(pg: PostgresStore) -> None:
    """Queued, waiting, running on its lease, a success on its end row (its document as
    the enqueue wrote it), a retry's document written again and then its success: each
    found by its tail with the status `jobs` gives it, in any case and without hyphens."""
    t0 = pg.clock()
    ended, retried, running = pg.enqueue([new_job() for _ in range(3)], now=t0)
    (waiting,) = pg.enqueue([new_job(depends_on=(running,))], now=t0)
    (queued,) = pg.enqueue([new_job(queue="later")], now=t0)
    pg.register_worker(WORKER)
    by_id = {job.id: job for job in pg.claim("w1", ["default"], 3, LEASE, now=t0)}
    assert pg.finish([succeeded(by_id[ended], "1"),
                      failed(by_id[retried], Outcome.FAILED, "boom")], now=t0) == []  # fmt: skip
    (again,) = pg.claim("w1", ["default"], 1, LEASE, now=t0 + 3600)
    assert again.id == retried
    assert pg.finish([succeeded(again, "2")], now=t0 + 3600) == []
    statuses = {ended: JobStatus.SUCCEEDED, retried: JobStatus.SUCCEEDED,
                running: JobStatus.RUNNING, waiting: JobStatus.WAITING,
                queued: JobStatus.QUEUED}  # fmt: skip
    for job_id, status in statuses.items():
        assert found(pg, job_id) == [(job_id, status)]
        assert pg.resolve_job_id(job_id[-8:].upper()) == job_id
        assert pg.resolve_job_id(job_id.replace("-", "")[-12:]) == job_id


def test_a_deleted_job_is_not_found_by_its_tail(pg: PostgresStore) -> None:
    """A purge deletes the job and its tail goes with it: nothing is left to keep in
    step (v19's table needed triggers for that, an operator's DELETE included)."""
    t0 = pg.clock()
    doomed, kept = pg.enqueue([new_job(max_retries=0), new_job()], now=t0)
    pg.register_worker(WORKER)
    (job,) = pg.claim("w1", ["default"], 1, LEASE, now=t0)
    assert job.id == doomed
    assert pg.finish([failed(job, Outcome.FAILED, "boom")], now=t0) == []
    assert pg.purge_dead_ids() == [doomed]
    with pytest.raises(JobNotFound):
        pg.resolve_job_id(doomed[-8:])
    assert pg.resolve_job_id(kept[-8:]) == kept


def test_two_jobs_that_share_a_tail_are_both_found_and_ambiguous(pg: PostgresStore) -> None:
    """Tails are not unique: two ids ending alike are two entries, and their tail names
    both (an ambiguity, never one of them picked)."""
    t0 = pg.clock()
    ids = ["00000000-0000-7000-8000-00000000abcd", "11111111-0000-7000-8000-00000000abcd"]
    assert pg.enqueue([NewJob("t", "{}", id=job_id) for job_id in ids], now=t0) == ids
    assert sorted(found(pg, ids[0])) == [(job_id, JobStatus.QUEUED) for job_id in ids]
    with pytest.raises(AmbiguousJobId):
        pg.resolve_job_id("0000abcd")


def test_the_migration_indexes_the_tails_of_the_jobs_already_there(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A queue migrated from schema v41 finds each job it held by its tail through the
    new index, and the table of tails and its triggers are gone."""
    migrations = SteeredMigrations(pg_url, monkeypatch)
    with migrations.store_before(42) as old:
        ids = old.enqueue([new_job() for _ in range(5)])
    with opened(PostgresStore(pg_url)) as store:
        assert store.link.migrate() == migrations.newest
        assert store.resolve_job_id(ids[2][-8:]) == ids[2]
        with store.link.pool.transaction() as conn:
            # This schema's triggers: other tests' schemas of older versions run beside.
            row = conn.execute(
                "SELECT to_regclass('job_tails') AS t, to_regclass('job_documents_tail_idx') AS i,"
                " (SELECT count(*) FROM pg_trigger AS g JOIN pg_class AS c ON c.oid = g.tgrelid"
                "  WHERE c.relnamespace = current_schema()::regnamespace"
                "    AND g.tgname LIKE 'job_tails%%') AS triggers"
            ).fetchone()
        assert row is not None
        assert (row["t"], row["i"] is not None, row["triggers"]) == (None, True, 0)
        (new,) = store.enqueue([new_job()])
        assert store.resolve_job_id(new[-8:]) == new

