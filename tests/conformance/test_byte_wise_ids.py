"""Job ids compare byte by byte (schema v23 on PostgreSQL, `COLLATE "C"`; SQLite's BINARY
collation always did; since schema v44 PostgreSQL keeps them as `uuid`, ordered by its
bytes as the text is by its hex digits): every column and index that holds a job id is
"C" after the upgrade from v22, nothing in them is lost, and the orders the code relies
on (the claim's tie on id, id order in SQL, Python's `sorted`) are one order on both
backends."""

from __future__ import annotations

from typing import Any

import pytest

from heartq.model import Finish, JobStatus, Lease, Outcome
from heartq.store import Store
from heartq.store.postgres.store import PostgresStore
from tests.support import opened

from .support import LEASE, SteeredMigrations, insert_version_1_job, new_ids, new_job, register

_MADE = new_ids(8)
IDS = [_MADE[i] for i in (3, 6, 0, 5, 1, 7, 2, 4)]
"""Caller ids, enqueued in an order other than their own: the claim's, the database's and
Python's `sorted` order them alike. (Before schema v44 they were texts that a language
collation sorts otherwise than bytes do; a job id is a UUID now, whose lower-case hex
digits and dashes every collation orders alike, so the v22 upgrade's "C" is checked in
the catalog below.)"""

JOB_ID_COLUMNS = {
    ("jobs", "id"),
    ("ended_executions", "job_id"),
    ("executions", "job_id"),
    ("job_dependencies", "job_id"),
    ("job_dependencies", "depends_on"),
    ("job_tails", "job_id"),
    ("job_tails", "tail"),
    ("pruned_successes", "id"),
    ("schedules", "last_job_id"),
}
"""Every PostgreSQL column that holds a job id (or a tail of one) at v23, tables and the
view."""

INDEXED = {
    ("jobs_pkey", "id"),
    ("jobs_claim_idx", "id"),
    ("jobs_keyed_claim_idx", "id"),
    ("jobs_rated_claim_idx", "id"),
    ("executions_pkey", "job_id"),
    ("job_dependencies_pkey", "job_id"),
    ("job_dependencies_pkey", "depends_on"),
    ("job_dependencies_depends_on_idx", "depends_on"),
    ("job_tails_pkey", "tail"),
    ("job_tails_pkey", "job_id"),
    ("pruned_successes_pkey", "id"),
}
"""The indexes over them at v23, each a key to compare byte-wise too."""


def test_the_claim_breaks_ties_in_byte_order(store: Store) -> None:
    """Jobs of one priority and run time are claimed in id order, and that order is
    Python's `sorted` (code points, as bytes of UTF-8): one claim at a time (the claim's
    own ORDER BY), then a batch (which store/records.py sorts again in Python); the
    dashboard's pages, newest first, are the reverse."""
    t0 = store.clock()
    register(store, "w1", t0)
    assert store.enqueue([new_job(id=job_id) for job_id in IDS], now=t0) == IDS
    page = store.browse_jobs(limit=len(IDS)).jobs
    assert [job["id"] for job in page] == sorted(IDS, reverse=True)
    half = len(IDS) // 2
    one_by_one = [store.claim("w1", ["default"], 1, LEASE, now=t0)[0].id for _ in range(half)]
    batch = [job.id for job in store.claim("w1", ["default"], len(IDS), LEASE, now=t0)]
    assert one_by_one + batch == sorted(IDS)


def _query(store: PostgresStore, sql: str) -> list[Any]:
    with store.link.pool.transaction() as conn:
        return conn.execute(sql).fetchall()  # type: ignore[arg-type]


def _collations(store: PostgresStore) -> dict[tuple[str, str], str]:
    """(relation, column) -> collation, of every text column of the schema's tables,
    views and indexes."""
    rows = _query(
        store,
        "SELECT c.relname, a.attname, co.collname FROM pg_attribute AS a"
        " JOIN pg_class AS c ON c.oid = a.attrelid"
        " JOIN pg_collation AS co ON co.oid = a.attcollation"
        " WHERE c.relnamespace = current_schema()::regnamespace AND a.attnum > 0"
        " AND NOT a.attisdropped AND a.atttypid = 'text'::regtype",
    )
    return {(r["relname"], r["attname"]): r["collname"] for r in rows}


TABLES = ("jobs", "ended_executions", "job_dependencies", "job_tails", "pruned_successes")


def _files(store: PostgresStore) -> dict[str, int]:
    """Each table's and index's file: a new one after a rewrite or a rebuild."""
    rows = _query(
        store,
        "SELECT relname, pg_relation_filenode(oid) AS f FROM pg_class"
        " WHERE relnamespace = current_schema()::regnamespace AND relkind IN ('r', 'i')",
    )
    return {r["relname"]: r["f"] for r in rows}


def _contents(store: PostgresStore) -> dict[str, list[Any]]:
    """What the tables and the view keyed by job ids hold."""
    reads = {
        "executions": 'SELECT * FROM executions ORDER BY job_id COLLATE "C", execution_id',
        "edges": "SELECT * FROM job_dependencies ORDER BY job_id, depends_on",
        "tails": "SELECT * FROM job_tails ORDER BY job_id",
        "pruned": "SELECT * FROM pruned_successes ORDER BY id",
        "jobs": "SELECT id, status, execution_id FROM jobs ORDER BY id",
    }
    return {name: [dict(row) for row in _query(store, sql)] for name, sql in reads.items()}


def test_the_upgrade_from_v22_makes_every_job_id_byte_wise(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A v22 queue with queued, running, finished and waiting jobs, edges, tails and a
    pruned success: after migration 23 every job-id column and every index over one is
    "C" (each index rebuilt, no table rewritten), the view `executions` shows the same
    rows and keeps its grant; upgraded to today's schema, ids sort as Python sorts them,
    and the running attempt still finishes, releasing the job that waits for it."""
    migrations = SteeredMigrations(pg_url, monkeypatch)
    migrations.only(lambda version: version <= 22)
    with opened(pg_url) as old:
        assert old.link.migrate() == 22
        assert isinstance(old, PostgresStore)
        t0 = old.clock()
        _write_as_v22(old, t0)
        before = _contents(old)
        files = _files(old)
        assert {_collations(old)[column] for column in JOB_ID_COLUMNS} == {"default"}
    migrations.only(lambda version: version <= 23)
    with opened(pg_url) as v23:
        assert v23.link.migrate() == 23
        assert isinstance(v23, PostgresStore)
        collations = _collations(v23)
        assert {column: collations[column] for column in JOB_ID_COLUMNS | INDEXED} == {
            column: "C" for column in JOB_ID_COLUMNS | INDEXED
        }
        assert collations[("jobs", "task")] == "default"  # only job ids changed
        assert _contents(v23) == before
        after = _files(v23)
        assert {t: after[t] for t in TABLES} == {t: files[t] for t in TABLES}  # no rewrite
        assert all(after[index] != files[index] for index, _ in INDEXED)  # rebuilt
        (grant,) = _query(v23, "SELECT has_table_privilege('public', 'executions', 'SELECT')")
        assert grant["has_table_privilege"]
    migrations.all()

    store = PostgresStore(pg_url)
    try:
        assert store.link.migrate() == migrations.newest
        ours = [r["id"] for r in _query(store, "SELECT id FROM jobs ORDER BY id") if r["id"] in IDS]
        assert ours == sorted(IDS) != IDS  # enqueued in another order

        running = Lease(RUNNING, 1, "w1")
        done = Finish(running, Outcome.SUCCEEDED, JobStatus.SUCCEEDED, result_json="2")
        assert store.finish([done], now=t0 + 1) == []
        assert store.get_job(WAITER)["status"] == "queued"
        assert store.resolve_job_id(WAITER[-8:]) == WAITER
    finally:
        store.link.close()


DONE, RUNNING = IDS[:2]
WAITER, PRUNED = new_ids(2)


def _write_as_v22(store: PostgresStore, t0: float) -> None:
    """A v22 queue as that heartq's statements left it (today's write tables it has
    not): the jobs of `IDS` queued, the first succeeded (its execution row written, as
    v22's finish did), the second running on its own row, a job waiting for both (the
    edge of the first ended), a pruned success, and a grant on the view."""
    for job_id in IDS:
        insert_version_1_job(store, t0, job_id)
    t = f"to_timestamp({t0!r})"
    with store.link.pool.transaction() as conn:
        conn.execute(
            f"UPDATE jobs SET status = 'succeeded', execution_id = 1, attempts = 1,"
            f" worker_id = 'w1', started_at = {t}, finished_at = {t}, result = '1',"
            f" has_dependents = true WHERE id = '{DONE}'"
        )
        conn.execute(
            "INSERT INTO ended_executions (job_id, execution_id, worker_id, started_at,"
            f" ended_at, outcome) VALUES ('{DONE}', 1, 'w1', {t}, {t}, 'succeeded')"
        )
        conn.execute(
            f"UPDATE jobs SET status = 'running', execution_id = 1, attempts = 1,"
            f" worker_id = 'w1', started_at = {t}, heartbeat_at = {t},"
            f" lease_expires_at = {t} + interval '{LEASE} seconds', has_dependents = true"
            f" WHERE id = '{RUNNING}'"
        )
        conn.execute(
            "INSERT INTO jobs (id, task, queue, args, status, run_at, max_retries,"
            " retry_backoff, retry_backoff_max, created_at, updated_at, waiting_for)"
            f" VALUES ('{WAITER}', 'task', 'default', '{{}}', 'waiting', {t}, 3, 5, 3600,"
            f" {t}, {t}, 1)"
        )
        conn.execute(
            "INSERT INTO job_dependencies (job_id, depends_on, position, ended)"
            f" VALUES ('{WAITER}', '{RUNNING}', 0, NULL), ('{WAITER}', '{DONE}', 1, 'succeeded')"
        )
        conn.execute(f"INSERT INTO pruned_successes (id) VALUES ('{PRUNED}')")
        conn.execute("GRANT SELECT ON executions TO PUBLIC")
