"""A job's id is a UUID as heartq makes them, in lower case with its dashes
(`heartq.ids.is_job_id`; PostgreSQL keeps it as `uuid` since schema v44, SQLite as text).
Any other text names no job, on both backends alike: every lookup answers "not found"
without asking the database (which on PostgreSQL would refuse the text, or read an
upper-case or undashed UUID as the job's own), a caller's own id of another form is
refused, and so is a dependency on one. Operators still type ids short, in any case,
with or without dashes (`resolve_job_id`). The v44 migration (PostgreSQL) refuses a
queue holding an id it could not keep as it is, and carries every other one over."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg.sql import SQL, Identifier

from heartq.errors import ConfigError, DependencyNotFound, JobNotFound, PayloadError
from heartq.ids import LEAST_JOB_ID
from heartq.lifecycle.fate import failed
from heartq.model import Finish, JobStatus, Lease, Outcome
from heartq.store import Store
from heartq.store.postgres import PostgresStore
from heartq.store.postgres.connection import parse_url
from tests.support import opened

from .support import (
    LEASE,
    SteeredMigrations,
    claim_one,
    enqueue_one,
    new_ids,
    new_job,
    outcomes_of,
    reader_role,
    register,
)

UUID_IDS = 44
"""The migration that makes a job's id a `uuid` on PostgreSQL (nothing on SQLite)."""

PLANTED = "planted-job"
"""SQLite: a row written under this id, as an older heartq let a caller name a job (the
v44 migration of SQLite changes no row): not a job id either, so found by no lookup."""


def _other_forms(job_id: str) -> list[str]:
    """Texts that PostgreSQL's `uuid` would read as `job_id` (or refuse), but that are
    not a job id as heartq prints one."""
    bare = job_id.replace("-", "")
    return [job_id.upper(), bare, bare.upper(), "{" + job_id + "}", f" {job_id}", job_id + " "]


def _plant(store: Store, t0: float, job_id: str) -> None:
    """SQLite: a queued job's row written as it is, under `job_id`."""
    with store._write() as conn:  # type: ignore[attr-defined]
        conn.execute(
            "INSERT INTO heartq_jobs (id, task, queue, args, status, run_at, max_retries, "
            "retry_backoff, retry_backoff_max, created_at, updated_at) VALUES "
            "(?, 'task', 'default', '{}', 'queued', ?, 3, 5, 3600, ?, ?)",
            (job_id, t0 - 1, t0 - 1, t0 - 1),
        )


def _dead(store: Store, t0: float) -> str:
    """A job that failed its one attempt (nothing else queued when it is claimed)."""
    job_id = enqueue_one(store, t0, max_retries=0)
    job = claim_one(store, "w1", t0)
    assert job.id == job_id
    assert store.finish([failed(job, Outcome.FAILED, "boom")], now=t0) == []
    return job_id


def test_a_text_that_is_not_a_job_id_names_no_job(store: Store, t0: float) -> None:
    """Every lookup by id answers "not found" for a text that is not a job id, though the
    text names a stored job to PostgreSQL's `uuid` (its id in upper case, without dashes,
    in braces) or to SQLite's text (a row planted under it): the job is not read, not
    cancelled, not awaited, not started at an attempt, not replayed, not claimed."""
    register(store, "w1", t0)
    dead = _dead(store, t0)
    queued = enqueue_one(store, t0)
    texts = [*_other_forms(queued), *_other_forms(dead), "not-a-uuid", "", queued[:-1] + "g"]
    if "sqlite" in store.link.url:
        _plant(store, t0, PLANTED)
        texts.append(PLANTED)
    for text in texts:
        for lookup in (store.get_job, store.job_end, store.await_end, store.dependency_results):
            with pytest.raises(JobNotFound):
                lookup(text)
        with pytest.raises(JobNotFound):
            store.cancel_job(text, now=t0 + 1)
        assert store.start_at_attempt(text, 3, now=t0 + 1) is False, text
        assert store.replay_dead([text], now=t0 + 1) == [], text
        assert store.claim_ids("w1", [text], LEASE, now=t0 + 1) == [], text
    shown = store.get_job(queued)
    assert (shown["status"], shown["attempts"], shown["execution_id"]) == ("queued", 0, 0)
    assert not shown["cancel_requested"] and shown["cancelled_by"] is None
    assert store.get_job(dead)["status"] == JobStatus.DEAD
    # the ids themselves: each lookup answers
    assert [job.id for job in store.claim_ids("w1", [queued], LEASE, now=t0 + 1)] == [queued]
    assert store.replay_dead([dead], now=t0 + 2) == [dead]


@pytest.mark.parametrize("options", [{}, {"unique_key": "u"}])
def test_a_callers_id_that_is_not_a_job_id_is_refused(
    store: Store, t0: float, options: dict[str, Any]
) -> None:
    """A caller's own `NewJob.id` must be a job id as heartq makes one: another text (an
    upper-case or undashed UUID too, which PostgreSQL would store as another id) is
    refused, and so is the nil UUID (the ready log's "before every id", which no claim
    would pass), and nothing of its batch is stored, on both enqueue paths (PostgreSQL's one
    statement for plain jobs, the transaction for those with a unique key)."""
    kept, other = new_ids(2)
    for refused in ("not-a-uuid", other.upper(), other.replace("-", ""), f"{{{other}}}",
                    LEAST_JOB_ID):  # fmt: skip
        batch = [new_job(id=kept), new_job(id=refused, **options)]
        with pytest.raises(PayloadError, match="UUID") as error:
            store.enqueue(batch, now=t0)
        assert repr(refused) in str(error.value)
    assert store.list_jobs() == []
    with pytest.raises(JobNotFound):
        store.get_job(kept)
    assert store.enqueue([new_job(id=kept, **options)], now=t0) == [kept]  # as it is: kept


def test_a_dependency_that_is_not_a_job_id_is_not_found(store: Store, t0: float) -> None:
    """`depends_on` naming a text that is not a job id (a stored job's id in another form,
    a row planted under it on SQLite) names no job: `DependencyNotFound`, nothing
    stored; the job's own id is found."""
    known = enqueue_one(store, t0)
    texts = [*_other_forms(known), "not-a-uuid"]
    if "sqlite" in store.link.url:
        _plant(store, t0, PLANTED)
        texts.append(PLANTED)
    before = len(store.list_jobs())
    for text in texts:
        with pytest.raises(DependencyNotFound) as refused:
            store.enqueue([new_job("x"), new_job("y", depends_on=(known, text))], now=t0)
        assert refused.value.job_ids == [text]
    assert len(store.list_jobs()) == before
    waiting = enqueue_one(store, t0, depends_on=(known,))
    assert [d["id"] for d in store.get_job(waiting)["depends_on"]] == [known]


def test_a_shortened_id_names_its_job_and_other_texts_none(store: Store, t0: float) -> None:
    """An id typed short: its first 8 characters or more (with or without the dashes, in
    any case), its last 8 or more (likewise), or the whole id in another form, name the
    job; texts that no id starts or ends with name none."""
    # a start of its own: the others, made now, share their first characters
    early = "0123abcd" + new_ids(1)[0][8:]
    store.enqueue([new_job(id=early)], now=t0)
    ids = store.enqueue([new_job() for _ in range(3)], now=t0)
    bare = early.replace("-", "")
    for typed in (
        "0123abcd", "0123ABCD", early[:13], bare[:12], early[:18].upper(),  # starts
        early[-8:], early[-8:].upper(), early[-13:], bare[-16:], f" {bare[-20:]} ",  # tails
        early, early.upper(), bare, bare.upper(),  # the whole id
    ):  # fmt: skip
        assert store.resolve_job_id(typed) == early, typed
    middle = ids[1]
    others = [job_id for job_id in [early, *ids] if job_id != middle]
    unique = next(
        middle[:n] for n in range(8, 37) if not any(o.startswith(middle[:n]) for o in others)
    )
    assert store.resolve_job_id(unique) == middle
    assert store.resolve_job_id(unique.replace("-", "")) == middle
    assert store.resolve_job_id(middle[-8:]) == middle
    for text in ("not-a-uuid", "zzzzzzzz", "{" + early + "}", early[:-1] + "g", "0123abcg"):
        with pytest.raises(JobNotFound):
            store.resolve_job_id(text)


# -- the migration (PostgreSQL) -------------------------------------------------------------


def _insert_document(conn: Any, job_id: str, t0: float) -> None:
    """A queued job's document as it stands at v43 (with no ready-log entry: enough for
    the migration, which reads every id)."""
    conn.execute(
        "INSERT INTO job_documents (id, task, queue, args, status, run_at, max_retries,"
        " retry_backoff, retry_backoff_max, created_at, updated_at) VALUES"
        " (%(id)s, 'task', 'default', '{}', 'queued', to_timestamp(%(t)s), 3, 5, 3600,"
        " to_timestamp(%(t)s), to_timestamp(%(t)s))",
        {"id": job_id, "t": t0},
    )


def _rows(store: PostgresStore, sql: str) -> list[tuple[Any, ...]]:
    with store.link.pool.transaction() as conn:
        return [tuple(row.values()) for row in conn.execute(sql).fetchall()]  # type: ignore[arg-type]


def _version(store: PostgresStore) -> int:
    ((version,),) = _rows(store, "SELECT max(version) FROM schema_migrations")
    return int(version)


def _id_type(store: PostgresStore) -> str:
    ((kind,),) = _rows(
        store,
        "SELECT data_type FROM information_schema.columns WHERE table_schema ="
        " current_schema() AND table_name = 'job_documents' AND column_name = 'id'",
    )
    return str(kind)


@pytest.mark.parametrize(
    "planted",
    [
        lambda: "not-a-uuid",
        lambda: new_ids(1)[0].upper(),  # PostgreSQL's `uuid` reads these two as another id
        lambda: new_ids(1)[0].replace("-", ""),
        lambda: LEAST_JOB_ID,  # the ready log's "before every id"
    ],
    ids=["text", "upper-case", "undashed", "nil"],
)
def test_the_migration_refuses_an_id_that_is_not_a_uuid(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, planted: Callable[[], str]
) -> None:
    """A v43 queue holding a job whose id is not a job id (a caller's own, which v43 took
    as it was): the v44 migration refuses, naming it, and changes nothing (the schema
    stays at v43, the job's row as it was); once the id is changed, it runs."""
    bad = planted()
    (good,) = new_ids(1)
    migrations = SteeredMigrations(pg_url, monkeypatch)
    with migrations.store_before(UUID_IDS) as old:
        assert isinstance(old, PostgresStore)
        t0 = old.clock()
        with old.link.pool.transaction() as conn:
            _insert_document(conn, bad, t0)
            _insert_document(conn, good, t0)
        before = _rows(old, "SELECT id, status, run_at FROM job_documents ORDER BY id")
    with opened(pg_url) as store:
        assert isinstance(store, PostgresStore)
        with pytest.raises(ConfigError) as refused:
            store.link.migrate()
        assert str(refused.value) == (
            f"the queue's schema cannot be migrated to v{UUID_IDS}: job id {bad!r} is not a"
            ' uuid heartq can keep (docs/UPGRADING.md, "Schema v44")'
        )
        assert _version(store) == UUID_IDS - 1
        assert _id_type(store) == "text"
        assert _rows(store, "SELECT id, status, run_at FROM job_documents ORDER BY id") == before
        with store.link.pool.transaction() as conn:
            conn.execute("DELETE FROM job_documents WHERE id = %s", [bad])
        assert store.link.migrate() == migrations.newest >= UUID_IDS
        assert _id_type(store) == "uuid"
        assert store.get_job(good)["status"] == JobStatus.QUEUED


def test_the_migration_names_an_operators_view_that_stops_it(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A view of the operator's own on `jobs` stops the v44 migration (the views it reads
    are made again): one line naming it, nothing changed; once dropped, it runs."""
    migrations = SteeredMigrations(pg_url, monkeypatch)
    with migrations.store_before(UUID_IDS) as old:
        assert isinstance(old, PostgresStore)
        with old.link.pool.transaction() as conn:
            conn.execute("CREATE VIEW report_of_jobs AS SELECT id, status FROM jobs")
    with opened(pg_url) as store:
        assert isinstance(store, PostgresStore)
        with pytest.raises(ConfigError, match=f"to v{UUID_IDS}: .*report_of_jobs"):
            store.link.migrate()
        assert _version(store) == UUID_IDS - 1
        with store.link.pool.transaction() as conn:
            conn.execute("DROP VIEW report_of_jobs")
        assert store.link.migrate() == migrations.newest
        assert _id_type(store) == "uuid"


def test_the_sqlite_migration_refuses_an_id_that_is_not_a_uuid(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite keeps its text ids, but from v44 a lookup by any other text finds nothing:
    a v43 file holding a job under such an id is refused as PostgreSQL's queue is, the
    file left at v43 with the row as it was; once the id is changed, it runs."""
    url = f"sqlite:///{tmp_path / 'heartq.db'}"
    migrations = SteeredMigrations(url, monkeypatch)
    with migrations.store_before(UUID_IDS) as old:
        _plant(old, old.clock(), "my-own-id")
    with opened(url) as store:
        with pytest.raises(ConfigError, match=f"cannot be migrated to v{UUID_IDS}: a job id is"):
            store.link.migrate()
        with store._write() as conn:  # type: ignore[attr-defined]
            versions = conn.execute("SELECT max(version) FROM heartq_schema_migrations")
            assert versions.fetchone()[0] == UUID_IDS - 1
            assert [tuple(r) for r in conn.execute("SELECT id FROM heartq_jobs")] == [
                ("my-own-id",)
            ]
            (good,) = new_ids(1)
            conn.execute("UPDATE heartq_jobs SET id = ?", (good,))
        assert store.link.migrate() == migrations.newest >= UUID_IDS
        assert store.get_job(good)["status"] == JobStatus.QUEUED


AS_STORED = (
    "SELECT id::text, task, status, attempts, worker_id, execution_id, run_at, started_at,"
    " finished_at, result::text, waiting_for, has_dependents FROM jobs ORDER BY id",
    "SELECT job_id::text, execution_id, worker_id, started_at, ended_at, outcome"
    " FROM executions ORDER BY job_id, execution_id",
    "SELECT job_id::text, depends_on::text, position, ended FROM job_dependencies",
    "SELECT job_id::text, queue, priority, run_at FROM ready ORDER BY job_id",
)
"""What the views and the tables keyed by job ids hold, ids as text (the same before
and after the migration)."""


def _as_of_v43(old: PostgresStore, t0: float) -> dict[str, str]:
    """Jobs of a v43 queue, written as v43's statements wrote them: queued (enqueued:
    today's enqueue writes a v43 document and ready-log entry as they were), running on
    its lease row, succeeded on its end row (claimed, then its success appended), and
    waiting for the running one (its edge). Returns each one's id by what it is."""
    names = ("queued", "running", "done", "waiting")
    ids = dict(zip(names, old.enqueue([new_job(name) for name in names], now=t0), strict=True))
    params = {**ids, "t": t0, "lease": LEASE}
    with old.link.pool.transaction() as conn:
        conn.execute(
            "DELETE FROM ready WHERE job_id IN (%(running)s, %(done)s, %(waiting)s)", params
        )
        conn.execute(  # the claim: the document marked running, the attempt on its lease
            "UPDATE job_documents SET status = 'running', started_at = to_timestamp(%(t)s),"
            " updated_at = to_timestamp(%(t)s), ready_xid = NULL"
            " WHERE id IN (%(running)s, %(done)s)",
            params,
        )
        conn.execute(
            "INSERT INTO leases (job_id, execution_id, worker_id, attempts, started_at,"
            " lease_expires_at, heartbeat_at) VALUES (%(running)s, 1, 'w1', 1,"
            " to_timestamp(%(t)s), to_timestamp(%(t)s) + make_interval(secs => %(lease)s),"
            " to_timestamp(%(t)s))",
            params,
        )
        conn.execute(  # the success appended: the lease gone, the end on a row of its own
            "INSERT INTO job_ends (job_id, status, execution_id, worker_id, attempts,"
            " started_at, heartbeat_at, finished_at, claimed_ahead, result) VALUES"
            " (%(done)s, 'succeeded', 1, 'w1', 1, to_timestamp(%(t)s), to_timestamp(%(t)s),"
            " to_timestamp(%(t)s) + interval '1 second', false, '\"ok\"')",
            params,
        )
        conn.execute(
            "UPDATE job_documents SET status = 'waiting', waiting_for = 1, ready_xid = NULL"
            " WHERE id = %(waiting)s",
            params,
        )
        conn.execute(
            "UPDATE job_documents SET has_dependents = true WHERE id = %(running)s", params
        )
        conn.execute(
            "INSERT INTO job_dependencies (job_id, depends_on, position)"
            " VALUES (%(waiting)s, %(running)s, 0)",
            params,
        )
    return ids


def test_the_migration_keeps_every_job_and_who_may_read_them(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A v43 queue (a queued job, a running one on its lease, one succeeded on its end
    row, one waiting for the running one) upgraded to v44: every id column is a `uuid`,
    every job reads as it did, a role granted `SELECT` on the views `jobs` and
    `executions` still reads them, the running attempt finishes and releases the job
    that waits for it, and the queued jobs are claimed."""
    migrations = SteeredMigrations(pg_url, monkeypatch)
    conninfo, schema = parse_url(pg_url)
    with reader_role(pg_url) as (admin, role):
        with migrations.store_before(UUID_IDS) as old:
            assert isinstance(old, PostgresStore)
            t0 = float(int(old.clock()))
            ids = _as_of_v43(old, t0)
            before = [_rows(old, sql) for sql in AS_STORED]
            admin.execute(SQL("GRANT USAGE ON SCHEMA {} TO {}").format(
                Identifier(schema), Identifier(role)))  # fmt: skip
            for view in ("jobs", "executions"):
                admin.execute(SQL("GRANT SELECT ON {} TO {}").format(
                    Identifier(schema, view), Identifier(role)))  # fmt: skip
        with opened(pg_url) as store:
            assert isinstance(store, PostgresStore)
            assert store.link.migrate() == migrations.newest >= UUID_IDS
            kinds = _rows(
                store,
                "SELECT DISTINCT data_type FROM information_schema.columns"
                " WHERE table_schema = current_schema() AND (table_name, column_name) IN"
                " (('job_documents', 'id'), ('leases', 'job_id'), ('ready', 'job_id'),"
                "  ('job_ends', 'job_id'), ('job_dependencies', 'job_id'),"
                "  ('job_dependencies', 'depends_on'), ('jobs', 'id'),"
                "  ('executions', 'job_id'))",
            )
            assert kinds == [("uuid",)]
            assert [_rows(store, sql) for sql in AS_STORED] == before
            shown = {name: store.get_job(job_id) for name, job_id in ids.items()}
            assert {name: job["status"] for name, job in shown.items()} == {
                "queued": "queued", "running": "running", "done": "succeeded",
                "waiting": "waiting",
            }  # fmt: skip
            assert shown["done"]["result"] == "ok"
            assert outcomes_of(shown["done"]) == ["succeeded"]
            assert outcomes_of(shown["running"]) == [None]
            assert [d["id"] for d in shown["waiting"]["depends_on"]] == [ids["running"]]
            with psycopg.connect(conninfo, user=role) as reader:
                jobs = reader.execute(
                    SQL("SELECT id::text, status FROM {} ORDER BY id").format(
                        Identifier(schema, "jobs")
                    )
                ).fetchall()
                runs = reader.execute(
                    SQL("SELECT job_id::text, outcome FROM {} ORDER BY job_id").format(
                        Identifier(schema, "executions")
                    )
                ).fetchall()
            assert jobs == sorted((job_id, shown[n]["status"]) for n, job_id in ids.items())
            assert (ids["running"], None) in runs
            running = Lease(ids["running"], 1, "w1")
            done = Finish(running, Outcome.SUCCEEDED, JobStatus.SUCCEEDED, result_json="1")
            assert store.finish([done], now=t0 + 2) == []
            assert store.get_job(ids["waiting"])["status"] == JobStatus.QUEUED
            register(store, "w2", t0 + 3)
            claimed = store.claim("w2", ["default"], 5, LEASE, now=t0 + 3)
            assert sorted(job.id for job in claimed) == sorted([ids["queued"], ids["waiting"]])
