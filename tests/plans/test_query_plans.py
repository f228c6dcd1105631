"""The hot statements use the indexes they were written for.

A test on a small table cannot notice a quadratic plan, so this reads the plans: claim
walks the claim index, reap the lease index, and every batch update probes the primary
key once per batch element instead of scanning the running jobs for each one.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from psycopg import sql as psql

from heartq.ids import id_range
from heartq.lifecycle.fate import succeeded
from heartq.model import ClaimedJob, NewJob
from heartq.store.postgres import PostgresStore
from heartq.store.postgres import queries as pg_q
from heartq.store.sql import fair
from heartq.store.sqlite import SQLiteStore
from heartq.store.sqlite import queries as q
from heartq.store.sqlite.queries import fair as fair_q
from tests import pg_harness
from tests.conformance.support import register
from tests.plans.batches import assert_probes_the_keys, batch_params
from tests.plans.steps import counting_steps
from tests.support import wait_for

EXPECTED = {
    "CLAIM": "USING INDEX heartq_jobs_claim_idx",
    # Rate-limited jobs: their own claim index, walked by key a priority at a time; a key's
    # starts by executions' one.
    "CLAIM_RATED": "rated_claim_idx (queue=? AND rate_key=? AND priority=? AND run_at<?)",
    "RATE_WAIT": "SEARCH e USING COVERING INDEX heartq_executions_rate_idx (rate_key=? AND",
    # Whether a keyed claim could find anything: a look at each keyed index's first entry.
    "KEYED_QUEUED": "SEARCH heartq_jobs USING INDEX heartq_jobs_keyed_claim_idx (queue=?",
    "RENEW": "SEARCH j USING INDEX sqlite_autoindex_heartq_jobs_1 (id=?)",
    "FINISH_JOBS": "SEARCH j USING INDEX sqlite_autoindex_heartq_jobs_1 (id=?)",
    "RELEASE_JOBS": "SEARCH j USING INDEX sqlite_autoindex_heartq_jobs_1 (id=?)",
    # An ended attempt's row, made from its job's: one key lookup per batch element.
    "CLOSE_EXECUTIONS": "SEARCH j USING INDEX sqlite_autoindex_heartq_jobs_1 (id=?)",
    "CLOSE_RELEASED": "SEARCH j USING INDEX sqlite_autoindex_heartq_jobs_1 (id=?)",
    # A job's attempts: the ended ones by their key, the running one by the job's.
    "GET_EXECUTIONS": "SEARCH heartq_ended_executions USING PRIMARY KEY (job_id=?)",
    # The reap, by the worker's lease: workers past it, each one's attached attempts, and
    # the detached attempts past their deadline, each through an index of its own.
    "EXPIRED_WORKERS": "SEARCH heartq_workers USING INDEX heartq_workers_lease_idx",
    "SELECT_LAPSED": "SEARCH j USING INDEX heartq_jobs_worker_idx (worker_id=?)",
    "SELECT_DETACHED": "SEARCH j USING INDEX heartq_jobs_detached_idx (detached_until>? AND",
    "RENEWED": "SEARCH j USING INDEX sqlite_autoindex_heartq_jobs_1 (id=?)",
    "SWEEP": "SEARCH j USING INDEX heartq_jobs_worker_idx (worker_id=?)",
    "SELECT_WORKER_JOBS": "SEARCH j USING INDEX heartq_jobs_worker_idx (worker_id=?)",
    "PULSE": "SEARCH j USING INDEX sqlite_autoindex_heartq_jobs_1 (id=?)",
    # The pulse's cancels: the attempts the worker holds, each by its own key.
    "RUNNING_CANCELS": "SEARCH j USING INDEX sqlite_autoindex_heartq_jobs_1 (id=?)",
    "DEACTIVATE_STALE": "heartq_workers_status_idx",
    "QUEUE_WAITS": "heartq_jobs_claim_idx",
    # The dashboard's job list: a window of the primary key, never the whole table.
    "BROWSE_FLOOR_BEFORE": "SEARCH heartq_jobs USING COVERING INDEX sqlite_autoindex_heartq_jobs_1",
    "BROWSE_JOBS_BEFORE": "USING INDEX sqlite_autoindex_heartq_jobs_1 (id>? AND id<?)",
    "FINISHED_PER_MINUTE": "USING COVERING INDEX heartq_jobs_finished_idx (status=? AND",
    # A shortened id: a start is a range of the primary key; a tail reads only its index.
    "JOBS_BY_PREFIX": "USING INDEX sqlite_autoindex_heartq_jobs_1 (id>? AND id<?)",
    "JOBS_BY_SUFFIX": "SCAN heartq_jobs USING COVERING INDEX sqlite_autoindex_heartq_jobs_1",
    # A job's dependents, found by the edges' index: a release reads no other edge.
    "SETTLE_DEPENDENTS": "SEARCH d USING INDEX heartq_job_dependencies_depends_on_idx",
    "END_DEPENDENCY_EDGES": "SEARCH d USING INDEX heartq_job_dependencies_depends_on_idx",
    # A drain's look at waiting jobs reads only them.
    "HAS_PENDING": "SEARCH w USING INDEX heartq_jobs_waiting_idx (queue=?)",
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_sqlite_statement_uses_its_index(tmp_path: Path, name: str) -> None:
    store = SQLiteStore(f"sqlite:///{tmp_path / 'plans.db'}")
    store.link.migrate()
    sql = getattr(q, name)
    params = dict.fromkeys(re.findall(r":(\w+)", sql), "[]")
    plan = store.link.pool.get().execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
    text = "; ".join(row[3] for row in plan)
    assert EXPECTED[name] in text, text
    if name in ("RENEW", "FINISH_JOBS", "RELEASE_JOBS", "PULSE", "CLOSE_EXECUTIONS",
                "RUNNING_CANCELS", "RENEWED"):  # fmt: skip
        assert text.startswith("SCAN"), f"the batch must be the outer loop: {text}"
    store.link.close()


def test_sqlite_fair_usage_reads_keys_through_their_indexes(tmp_path: Path) -> None:
    """`FAIR_USAGE` (`heartq queues`, the dashboard, the metrics) reads the jobs only
    through the fair claim index and the fair due index (each queue's line from its head,
    a probe per queue, the walk bounded) and the running jobs' index: never a scan of the
    jobs, so a backlog without keys, or a line past the count, is not walked."""
    store = SQLiteStore(f"sqlite:///{tmp_path / 'plans.db'}")
    store.link.migrate()
    params = {"keys": 1000, "counted": 10_000, "line": 10_000}
    plan = store.link.pool.get().execute("EXPLAIN QUERY PLAN " + q.FAIR_USAGE, params).fetchall()
    reads = [row[3] for row in plan if "heartq_jobs" in row[3] or " j " in f"{row[3]} "]
    assert "SEARCH heartq_jobs USING INDEX heartq_jobs_fair_claim_idx (queue=?)" in reads
    assert "SEARCH heartq_jobs USING INDEX heartq_jobs_fair_due_idx (queue=?)" in reads
    for read in reads:  # a SCAN of an index here is a queue's first entry (LIMIT 1)
        assert (
            "USING INDEX heartq_jobs_fair_" in read or "heartq_jobs_worker_idx" in read
            or "(rowid=?)" in read
        ), reads
    store.link.close()


def _fair_claim_steps(path: Path, keys: int, unkeyed: int) -> int:
    """The virtual machine's steps (hundreds) of SQLite's claim by turns (`fair.claim`:
    the due untagged jobs tagged, a claim of 10 in tag order, the clocks moved), rolled
    back, over `keys` keys of five jobs each, `unkeyed` jobs without a key (none: the
    claim's one statement; some: its two) and a key of 10,000 jobs, after three claims:
    the work done, counted, not timed."""
    store = SQLiteStore(f"sqlite:///{path}")
    store.link.migrate()
    register(store, "w1", 0.0)
    jobs = [NewJob("t", "{}", fair_key=f"k{n:05d}") for n in range(keys) for _ in range(5)]
    store.enqueue(jobs, now=0.0)
    store.enqueue([NewJob("t", "{}") for _ in range(unkeyed)], now=0.0)
    store.enqueue([NewJob("t", "{}", fair_key="flood") for _ in range(10_000)], now=0.0)
    for _ in range(3):
        store.claim("w1", ["default"], 10, 30.0, now=1.0)
    conn = store.link.pool.get()
    params = {"queues": '["default"]', "now": 1.0, "limit": 10, "worker_id": "w1",
              "lease": 30.0, "ahead": False}  # fmt: skip
    with counting_steps(conn, 100) as steps:
        conn.execute("BEGIN")
        try:
            assert len(fair.claim(fair_q, conn, conn, params)) == 10
        finally:
            conn.execute("ROLLBACK")
    store.link.close()
    return steps[0]


def test_sqlite_fair_claim_reads_its_turns_in_one_walk(tmp_path: Path) -> None:
    """SQLite's claim by turns reads the jobs only through the claim indexes (each
    queue's line by tag and its jobs without a key, each from its head, stopped at the
    claim's slots; the untagged jobs due, oldest first) and the jobs it takes by their
    rowid, in its one statement (a queue whose queued jobs all have a key; its probes
    for a job without a key and for one due untagged, a seek each) as in its two: never
    a scan of the jobs, nor of every key. So it costs about the same with
    1,000 keys waiting as with 10, and a key's flood is not walked."""
    store = SQLiteStore(f"sqlite:///{tmp_path / 'plans.db'}")
    store.link.migrate()
    params = {"queues": '["default"]', "queue": "default", "now": 0.0, "limit": 10,
              "most": 1000, "worker_id": "w1", "lease": 30.0, "ahead": False}  # fmt: skip
    reads = []
    for sql in (fair_q.TAG_DUE, fair_q.FAIR_CHOSEN):
        plan = store.link.pool.get().execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
        reads += [row[3] for row in plan if "heartq_jobs" in row[3] or " j " in f"{row[3]} "]
    sql = "EXPLAIN QUERY PLAN " + fair_q.CLAIM_TURNS_ONE_QUEUE
    plan = store.link.pool.get().execute(sql, params).fetchall()
    store.link.close()
    assert {row[3] for row in plan if "heartq_jobs" in row[3]} == {  # the one statement
        "SEARCH heartq_jobs USING INDEX heartq_jobs_fair_claim_idx (queue=?)",
        "SEARCH heartq_jobs USING INDEX heartq_jobs_claim_idx (queue=?)",
        "SEARCH heartq_jobs USING INDEX heartq_jobs_fair_due_idx (queue=? AND run_at<?)",
        "SEARCH heartq_jobs USING INTEGER PRIMARY KEY (rowid=?)",
    }, plan
    assert "SEARCH heartq_jobs USING INDEX heartq_jobs_fair_claim_idx (queue=?)" in reads, reads
    assert "SEARCH heartq_jobs USING INDEX heartq_jobs_fair_due_idx (queue=? AND run_at<?)" in reads
    assert "SEARCH j USING INTEGER PRIMARY KEY (rowid=?)" in reads
    for read in reads:
        assert read.startswith("SEARCH") and (
            "_idx (queue=?" in read or "(rowid=?)" in read
        ), reads
    for unkeyed in (0, 10):
        few = _fair_claim_steps(tmp_path / f"few{unkeyed}.db", 10, unkeyed)
        many = _fair_claim_steps(tmp_path / f"many{unkeyed}.db", 1000, unkeyed)
        # within a tenth: the keys' finishes, one row a key, are a B-tree a level deeper
        assert many <= few * 1.1, (unkeyed, few, many)


@pytest.mark.parametrize("analyzed", [False, True])
@pytest.mark.parametrize(
    ("statement", "index"),
    [(q.CLAIM_ONE_QUEUE, "heartq_jobs_claim_idx"),
     (fair_q.CLAIM_TURNS_ONE_QUEUE, "heartq_jobs_fair_claim_idx")],
    ids=["CLAIM_ONE_QUEUE", "CLAIM_TURNS_ONE_QUEUE"],
)  # fmt: skip
def test_sqlite_one_queue_claim_walks_its_index_in_order(
    tmp_path: Path, analyzed: bool, statement: str, index: str
) -> None:
    """A one-queue claim reads its claim index in its order: no sort of the queue's
    backlog, with statistics or without, and (the claim by turns) its probe for a job
    without a key a seek, not a skip scan. `analyzed`: sqlite_stat1 as ANALYZE writes it
    for a million queued jobs, under which the queues-from-JSON claim skip-scanned the
    index (59 ms a claim with 100,000 queued, against 0.3 ms)."""
    path = tmp_path / "plans.db"
    store = SQLiteStore(f"sqlite:///{path}")
    store.link.migrate()
    store.link.close()
    if analyzed:
        with sqlite3.connect(path) as conn:
            conn.execute("ANALYZE")
            conn.execute("DELETE FROM sqlite_stat1")
            conn.execute(
                "INSERT INTO sqlite_stat1 VALUES ('heartq_jobs', 'heartq_jobs_claim_idx', "
                "'1000000 1000000 1000000 100000 1'), ('heartq_jobs', "
                "'heartq_jobs_fair_claim_idx', '1000000 1000000 1000000 1 1 1')"
            )
    with sqlite3.connect(path) as conn:
        params = {"worker_id": "w", "now": 0.0, "lease": 30.0, "queue": "q", "limit": 10}
        params["ahead"] = 0
        plan = conn.execute("EXPLAIN QUERY PLAN " + statement, params).fetchall()
    text = "; ".join(row[3] for row in plan)
    assert f"USING INDEX {index} (queue=?)" in text, text
    assert "TEMP B-TREE" not in text and "ANY(" not in text, text


@pytest.mark.parametrize("name", ["CLAIM", "CLAIM_ONE_QUEUE", "CLAIM_IN_ORDER"])
def test_postgres_claim_walks_each_queue_in_order(pg_server_url: str, name: str) -> None:
    """With several queues, the claim walks each one's claim index in priority order and
    stops at `limit` (LATERAL per queue): `queue = ANY(...)` would read every queued row
    of those queues and sort them at each claim, so claims would slow down with the
    backlog. A worker of one queue walks that queue's index the same way, in one scan.
    The ready log is read the same way, lane by lane from its frontier, a window of
    `limit` + 32 entries (half the jobs here are due ones, as jobs handed back are: no
    `ready_xid`). No ANALYZE: right after a burst of enqueues the statistics still say
    the table is empty, and the plan must hold then too (an index led by `status` once
    took the claim there, reading and sorting every queued row)."""
    with pg_harness.schema_url(pg_server_url) as url:
        pg = PostgresStore(url)
        try:
            pg.link.migrate()
            pg.enqueue([NewJob("t", "{}", queue=f"q{i % 3}") for i in range(6000)])
            with pg.link.pool.transaction() as conn:
                conn.execute(
                    "UPDATE job_documents SET ready_xid = NULL WHERE right(id::text, 1) < '8'"
                )
                conn.execute("DELETE FROM ready WHERE right(job_id::text, 1) < '8'")  # due now
            with pg.link.pool.transaction() as conn:
                params = {"worker_id": "w", "queues": ["q0", "q1"], "queue": "q0",
                          "limit": 10, "lease": 60, "ahead": False}  # fmt: skip
                explain = "EXPLAIN (ANALYZE, COSTS OFF) " + getattr(pg_q, name)
                rows = conn.execute(explain, dict(params, now=None)).fetchall()
                conn.rollback()
        finally:
            pg.link.close()
    plan = "\n".join(row["QUERY PLAN"] for row in rows)
    walks = re.findall(r"Index Scan using (jobs_claim_idx|ready_pkey) .*rows=(\d+).*\n"
                       r"\s+Index Cond: (.*)", plan)  # fmt: skip
    due = [int(n) for index, n, _ in walks if index == "jobs_claim_idx"]
    logged = [int(n) for index, n, _ in walks if index == "ready_pkey"]
    assert all(cond.startswith("((queue = ") and "ANY" not in cond for _, _, cond in walks), plan
    assert due and max(due) <= 10 and logged and max(logged) <= 10 + 32, plan
    if name != "CLAIM":
        assert len(due) == 1, plan  # one walk of the index, in its order


def test_postgres_fair_usage_counts_each_lane_through_the_ready_index(pg_server_url: str) -> None:
    """`FAIR_USAGE` on PostgreSQL: the keys from the ready log's lanes, each lane's queued
    jobs through the ready index's range of that lane, stopped at `counted`: a flood of
    3,000 jobs of one key is read 10 entries deep, and no scan reads the table."""
    with pg_harness.schema_url(pg_server_url) as url:
        pg = PostgresStore(url)
        try:
            pg.link.migrate()
            pg.enqueue([NewJob("t", "{}", fair_key="flood") for _ in range(3000)])
            pg.enqueue([NewJob("t", "{}", fair_key=f"k{i}") for i in range(5)])
            pg.enqueue([NewJob("t", "{}") for _ in range(3000)])
            with pg.link.pool.transaction() as conn:
                explain = "EXPLAIN (ANALYZE, COSTS OFF) " + pg_q.FAIR_USAGE
                rows = conn.execute(explain, {"keys": 1000, "counted": 10}).fetchall()
            usage = {u["key"]: u["queued"] for u in pg.fair_usage(counted=10)}
        finally:
            pg.link.close()
    plan = "\n".join(row["QUERY PLAN"] for row in rows)
    assert usage == {"flood": 10, **{f"k{i}": 1 for i in range(5)}}
    walks = re.findall(r"Index Scan using ready_pkey .*rows=(\d+) loops=(\d+)", plan)
    assert walks and all(int(n) <= 10 for n, _ in walks), plan
    assert "Seq Scan on job_documents" not in plan, plan


FILL_QUEUED = """
INSERT INTO job_documents (id, task, queue, args, status, run_at, max_retries, retry_backoff,
                  retry_backoff_max, created_at, updated_at)
SELECT ('f0000000-0000-7000-8000-' || lpad(to_hex(i), 12, '0'))::uuid, 't', 'default', '{}',
       'queued', now(), 3, 5, 300, now(), now()
FROM generate_series(1, %(n)s) AS i
"""


@pytest.fixture(scope="module", params=[False, True], ids=["unanalyzed", "analyzed-idle"])
def running_batch(
    pg_server_url: str, request: pytest.FixtureRequest
) -> Iterator[tuple[PostgresStore, list[ClaimedJob]]]:
    """A store with 2,000 jobs just claimed, and the claimed jobs: statistics that lag
    behind the burst of claims (`unanalyzed`), or taken while nothing ran (a `VACUUM
    ANALYZE` of an idle backlog of 203,000 queued jobs, `analyzed-idle`). Built once a
    module and process for each: the tests read plans in transactions they roll back."""
    with pg_harness.schema_url(pg_server_url) as url:
        pg = PostgresStore(url)
        try:
            pg.link.migrate()
            pg.enqueue([NewJob("t", "{}") for _ in range(3000)])
            if request.param:  # the plan flipped between 100,000 and 200,000 rows here
                with pg.link.pool.autocommit() as conn:
                    conn.execute(FILL_QUEUED, {"n": 200_000})
                    conn.execute("VACUUM ANALYZE job_documents")
            yield pg, pg.claim("w", ["default"], 2000, lease=60)
        finally:
            pg.link.close()


@pytest.mark.parametrize("size", [10, 110])
@pytest.mark.parametrize("name", ["FINISH", "RELEASE", "HEARTBEAT", "PULSE", "START_AHEAD"])
def test_postgres_batch_locks_probe_the_primary_key(
    running_batch: tuple[PostgresStore, list[ClaimedJob]], name: str, size: int
) -> None:
    """Finish, release, heartbeat, pulse and the start of buffered jobs lock and update
    their batch's rows through the primary key, one probe per element, with statistics
    that lag behind a burst of claims: joined on the batch with `status = 'running'`,
    the lock step read every running job (through jobs_worker_idx) for each batch of
    ten. And so does their update, with statistics taken while nothing ran (a `VACUUM
    ANALYZE` of an idle backlog, `analyzed-idle`): there the index of running jobs
    looked empty, the update scanned all of it for each row of its batch, and with a
    million jobs queued a heartbeat of a worker whose finishes queued up behind it took
    minutes (bench/backlog.py; BENCHMARKS.md, "The choices PostgreSQL's figures made").
    A batch of 110 (a finish of a worker at its 50 slots under a slow server) too: given
    the batch's ids as an array it could see into, the planner read the small table whole
    and joined each of its rows to every row of the batch."""
    pg, claimed = running_batch
    params = batch_params(pg, claimed[:size])
    with pg.link.pool.transaction() as conn:
        explain = "EXPLAIN (ANALYZE, COSTS OFF) " + getattr(pg_q, name)
        rows = conn.execute(explain, params).fetchall()
        conn.rollback()
    plan = "\n".join(row["QUERY PLAN"] for row in rows)
    assert_probes_the_keys(name, plan, size)
    assert "leases_worker_idx" not in plan and "Seq Scan on job_documents" not in plan, plan


@pytest.mark.parametrize("name", ["SETTLE_DEPENDENTS", "END_DEPENDENCY_EDGES"])
def test_postgres_a_release_reads_only_the_edges_of_the_jobs_that_ended(
    pg_server_url: str, name: str
) -> None:
    """A release (run in the transaction of every end of a job with dependents) finds
    the edges of the jobs that ended through their index, whatever the statistics say:
    with statistics that still call the table empty, a plan that reads every edge would
    cost each such end the whole table."""
    with pg_harness.schema_url(pg_server_url) as url:
        pg = PostgresStore(url)
        try:
            pg.link.migrate()
            firsts = pg.enqueue([NewJob("t", "{}") for _ in range(3000)])
            pg.enqueue([NewJob("t", "{}", depends_on=(f,)) for f in firsts])
            with pg.link.pool.transaction() as conn:
                explain = "EXPLAIN (COSTS OFF) " + getattr(pg_q, name)
                rows = conn.execute(explain, {"ids": firsts[:10], "now": None}).fetchall()
                conn.rollback()
        finally:
            pg.link.close()
    plan = "\n".join(row["QUERY PLAN"] for row in rows)
    assert "Seq Scan on job_dependencies" not in plan, plan
    assert "job_dependencies_depends_on_idx" in plan, plan


@pytest.mark.parametrize("analyzed", [False, True], ids=["fresh-statistics", "analyzed"])
def test_postgres_a_shortened_id_is_found_by_index(pg_server_url: str, analyzed: bool) -> None:
    """A shortened id is looked up as the start of an id (a range of the primary key)
    and as its tail (one probe of the documents' index of tails), never by
    reading every job id: on a busy table, whose pages are seldom all-visible, that read
    took seconds per million jobs. With statistics that still call the table empty, and
    after ANALYZE."""
    with pg_harness.schema_url(pg_server_url) as url:
        pg = PostgresStore(url)
        try:
            pg.link.migrate()
            ids = pg.enqueue([NewJob("t", "{}") for _ in range(3000)])
            wanted = ids[1234]
            low, high = id_range(wanted[:8]) or ("", "")
            plans = []
            with pg.link.pool.transaction() as conn:
                if analyzed:
                    conn.execute("ANALYZE job_documents")
                for statement, params in (
                    (pg_q.JOBS_BY_SUFFIX, {"suffix": wanted[-12:], "tail": wanted[-8:],
                                           "n": 12, "limit": 6}),
                    (pg_q.JOBS_BY_PREFIX, {"low": low, "high": high, "limit": 6}),
                ):  # fmt: skip
                    explain = "EXPLAIN (ANALYZE, COSTS OFF) " + statement
                    rows = conn.execute(explain, params).fetchall()
                    plans.append("\n".join(r["QUERY PLAN"] for r in rows))
        finally:
            pg.link.close()
    by_tail, by_start = plans
    assert "Index Cond: (\"right\"((id)::text, 8) =" in by_tail, by_tail
    assert "job_documents_tail_idx" in by_tail, by_tail
    assert "Seq Scan" not in by_tail, by_tail
    assert "Index Cond: ((id >=" in by_start and "jobs_pkey" in by_start, by_start
    assert "Seq Scan" not in by_start, by_start


@pytest.mark.parametrize("analyzed", [False, True], ids=["unanalyzed", "analyzed-idle"])
def test_postgres_running_cancels_probes_the_held_leases(
    pg_server_url: str, analyzed: bool
) -> None:
    """The pulse's read of cancel requests (when notified on PostgreSQL, every pulse
    behind a transaction-mode pooler) probes the primary key once per lease the worker
    holds, never the index of running jobs by worker, whatever the statistics say (with
    statistics taken while nothing ran, that index looks empty), and never the table,
    however many of its jobs the worker holds (2,000 of 3,000 here: `id = ANY(...)`
    read them by a seq scan, which under a held horizon walks every dead version)."""
    with pg_harness.schema_url(pg_server_url) as url:
        pg = PostgresStore(url)
        try:
            pg.link.migrate()
            pg.enqueue([NewJob("t", "{}") for _ in range(3000)])
            if analyzed:
                with pg.link.pool.autocommit() as conn:
                    conn.execute("VACUUM ANALYZE job_documents")
            held = pg.claim("w", ["default"], 2000, lease=60)
            plans = []
            with pg.link.pool.transaction() as conn:
                for some in (held[:10], held):
                    params = {"worker_id": "w", "ids": [j.id for j in some]}
                    explain = "EXPLAIN (ANALYZE, COSTS OFF) " + pg_q.RUNNING_CANCELS
                    rows = conn.execute(explain, params).fetchall()
                    plans.append("\n".join(row["QUERY PLAN"] for row in rows))
        finally:
            pg.link.close()
    for plan in plans:
        assert "Index Cond: (id = h.id)" in plan and "jobs_pkey" in plan, plan
        assert "jobs_worker_idx" not in plan and "Seq Scan on job_documents" not in plan, plan


def test_postgres_browse_reads_a_window_of_the_primary_key(pg_server_url: str) -> None:
    """The dashboard's job list reads at most `scan` ids of the primary key below the
    page's bound, newest first, however many jobs there are and whatever the filter: a
    filter on a status no job has still stops at the floor. No ANALYZE: statistics that
    still call the table small must not turn the window into a scan and a sort."""
    with pg_harness.schema_url(pg_server_url) as url:
        pg = PostgresStore(url)
        try:
            pg.link.migrate()
            ids = pg.enqueue([NewJob("t", "{}") for _ in range(3000)])
            params = {"status": "dead", "queue": None, "task": None, "ahead": None,
                      "before": ids[-1], "limit": 51, "scan_offset": 499}  # fmt: skip
            plans = []
            with pg.link.pool.transaction() as conn:
                *setup, floor_of = pg_q.BROWSE_FLOOR_BEFORE
                for statement in setup:
                    conn.execute(statement)
                row = conn.execute(floor_of, params).fetchone()
                assert row is not None
                for statement in (floor_of, pg_q.BROWSE_JOBS_BEFORE):
                    explain = "EXPLAIN (ANALYZE, COSTS OFF) " + statement
                    rows = conn.execute(explain, dict(params, floor=row["id"])).fetchall()
                    plans.append("\n".join(r["QUERY PLAN"] for r in rows))
        finally:
            pg.link.close()
    for plan in plans:
        assert "Index" in plan and "jobs_pkey" in plan and "Seq Scan" not in plan, plan
        assert "Sort" not in plan, plan
        scanned = [int(n) for n in re.findall(r"jobs_pkey .*rows=(\d+)", plan)]
        assert scanned and max(scanned) <= 500, plan


def test_postgres_rate_limited_claims_follow_the_keys_not_the_backlog(pg_server_url: str) -> None:
    """A backlog of rate-limited jobs (20,000 behind 20 keys) costs the plain claim nothing
    (its index holds none of them) and the rate-limited claim one skip-scan probe and one
    short walk per key: every statement of it reads jobs_rated_claim_idx by key, a key's
    starts by executions_rate_idx (ended attempts; the running ones are the job rows),
    and no scan of either table. No ANALYZE."""
    with pg_harness.schema_url(pg_server_url) as url:
        pg = PostgresStore(url)
        try:
            pg.link.migrate()
            rated = [NewJob("t", "{}", rate_key=f"k{i % 20}", rate_limit=3, rate_period=60.0)
                     for i in range(20_000)]  # fmt: skip
            for first in range(0, len(rated), 5000):
                pg.enqueue(rated[first : first + 5000])
            pg.enqueue([NewJob("t", "{}") for _ in range(100)])
            assert len(pg.claim("w", ["default"], 100, lease=60)) == 100  # the plain ones
            assert len(pg.claim("w", ["default"], 30, lease=60)) == 30  # 10 keys' starts
            params = {"worker_id": "w", "queues": ["default"], "queue": "default",
                      "limit": 10, "lease": 60, "now": None, "ahead": False,
                      "rate_keys": [f"k{i}" for i in range(10, 20)],
                      "concurrency_keys": []}  # fmt: skip
            plans = {}
            with pg.link.pool.transaction() as conn:
                names = ("KEYED_QUEUED", "CLAIM_IN_ORDER", "CLAIM_ONE_QUEUE", "CLAIM_RATE_KEYS",
                         "CLAIM_RATED", "RATE_WAIT")  # fmt: skip
                for name in names:
                    explain = "EXPLAIN (ANALYZE, COSTS OFF) " + getattr(pg_q, name)
                    rows = conn.execute(explain, params).fetchall()
                    plans[name] = "\n".join(r["QUERY PLAN"] for r in rows)
                conn.rollback()
        finally:
            pg.link.close()
    for plan in plans.values():
        assert "Seq Scan on job_documents" not in plan, plan
        assert "Seq Scan on ended_executions" not in plan, plan
        assert "Sort Key: job_documents" not in plan, plan  # never a sort of the backlog
    for name in ("CLAIM_IN_ORDER", "CLAIM_ONE_QUEUE"):
        plain = plans[name]
        assert "jobs_claim_idx" in plain and "jobs_rated_claim_idx" not in plain, plain
    for name in ("CLAIM_RATE_KEYS", "CLAIM_RATED", "RATE_WAIT"):
        plan = plans[name]
        read = r"jobs_rated_claim_idx on job_documents.*?rows=(\d+)"
        walked = [int(n) for n in re.findall(read, plan)]
        assert walked and max(walked) <= 10, plan  # per key: its best jobs, no more
        assert "Index Cond: ((queue = " in plan and "AND (rate_key = " in plan, plan
    assert "executions_rate_idx" in plans["RATE_WAIT"], plans["RATE_WAIT"]
    # The probe whether a keyed claim could find anything: the first entry of each index.
    probe = plans["KEYED_QUEUED"]
    first = r"(jobs_keyed_claim_idx|jobs_rated_claim_idx) on job_documents.*?rows=(\d+)"
    firsts = re.findall(first, probe)
    assert sorted(index for index, _ in firsts) == ["jobs_keyed_claim_idx", "jobs_rated_claim_idx"]
    assert all(int(n) <= 1 for _, n in firsts), probe


def _what_it_read(conn: Any, statement: str, params: dict[str, Any]) -> str:
    """A statement's plan as it ran, with its buffers, and the schema's tables' live and
    dead rows: what a failure of a bound on buffers needs to be told apart."""
    plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement, params).fetchall()
    tables = conn.execute(
        "SELECT relname, n_live_tup, n_dead_tup, last_vacuum, last_analyze"
        " FROM pg_stat_user_tables WHERE schemaname = current_schema() ORDER BY relname"
    ).fetchall()
    lines = [str(next(iter(row.values()))) for row in plan] + [str(row) for row in tables]
    return "\n".join(lines) + "\n"


def _buffers(explained: Any) -> int:
    """The buffers an `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)` says its plan read."""
    (plan,) = explained.fetchone().values()
    top = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
    return int(top["Shared Hit Blocks"] + top["Shared Read Blocks"])


def test_postgres_how_long_queues_wait_reads_only_the_queued_jobs(pg_server_url: str) -> None:
    """How long each queue's jobs wait (`heartq stats`, every worker's metrics) reads the
    queued jobs where they are held, the ready log and the claim indexes, whatever is
    kept of the jobs that ended: a success of the ready log keeps a document that says
    `queued` (its end row says it ended), so a read of `jobs` by status read every job
    kept, 3,000 here."""
    with pg_harness.schema_url(pg_server_url) as url:
        pg = PostgresStore(url)
        try:
            pg.link.migrate()
            t0 = pg.clock()
            register(pg, "w1", t0)
            for _ in range(6):
                pg.enqueue([NewJob("t", "{}") for _ in range(500)], now=t0)
                done = pg.claim("w1", ["default"], 500, 60.0, now=t0)
                assert pg.finish([succeeded(job, None) for job in done], now=t0) == []
            (due,) = pg.enqueue([NewJob("t", "{}")], now=t0 - 5)
            pg.enqueue([NewJob("t", "{}", delay=3600.0),
                        NewJob("t", "{}", concurrency_key="k", concurrency_limit=1),
                        NewJob("t", "{}", rate_key="r", rate_limit=1, rate_period=60.0)],
                       now=t0)  # fmt: skip
            with pg.link.pool.autocommit() as conn:  # the entries taken: autovacuum's work
                tables = conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
                ).fetchall()  # this schema's, not every test's of the database
                names = psql.SQL(", ").join(psql.Identifier(row["tablename"]) for row in tables)

                def vacuumed() -> bool:
                    """Whether a VACUUM removed the entries taken: a transaction another
                    test holds open in the run's database keeps those taken after it began
                    (seen: 1,500 of 3,000 left, and the log's index walked through them,
                    56 buffers), so it is run again until that transaction has ended."""
                    conn.execute(psql.SQL("VACUUM ANALYZE {}").format(names))
                    dead = conn.execute(
                        "SELECT n_dead_tup FROM pg_stat_user_tables"
                        " WHERE schemaname = current_schema() AND relname = 'ready'"
                    ).fetchone()
                    return dead is not None and dead["n_dead_tup"] == 0

                wait_for(vacuumed, 30.0, "a VACUUM that removes the entries taken", interval=0.2)
            read = {}
            told = ""  # what the statements and the tables looked like, where one read more
            with pg.link.pool.transaction() as conn:
                for name, params in (
                    ("QUEUE_WAITS", {"now": t0}),
                    ("OLDEST_RUNNABLE", {"queue": "default", "run_at": t0 - 5}),
                ):
                    explain = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + getattr(pg_q, name)
                    read[name] = _buffers(conn.execute(explain, params))
                    if read[name] >= 60:
                        told += _what_it_read(conn, getattr(pg_q, name), params)
                conn.rollback()
            waits = pg.queue_waits(now=t0)
        finally:
            pg.link.close()
    assert all(buffers < 60 for buffers in read.values()), f"{read}\n{told}"
    wait = waits["default"]
    assert (wait.oldest_job_id, wait.scheduled) == (due, 1), wait
