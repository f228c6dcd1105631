"""Upgrading a million-job PostgreSQL queue to today's schema, timed (issues 43 and 44).

    .venv/bin/python -m bench.upgrade --jobs 1000000
    .venv/bin/python -m bench.upgrade --quick              # the code path, 20,000 jobs

On a private cluster (`bench.servers.postgres.PrivateCluster`, never the shared server)
at PostgreSQL's default settings but `fsync = on` (the cluster's own default is off: an
upgrade's commit and its index builds' WAL are flushed as in production): heartq's own
migrations make the schema as it was before `--to` (v22 by default), one transaction of
`generate_series` statements fills it like a queue that has run for a while (`fill`
says what), `VACUUM ANALYZE` and a `CHECKPOINT` settle it, and then today's heartq
migrates it, timed from the call to its return: what an operator waits with every
worker stopped, and how long the migration holds its tables' locks (it runs in one
transaction). Printed: the rows and sizes before, the migration's seconds and WAL
bytes, and a check that the upgraded queue claims and finishes a job. `--rounds N`
repeats it on fresh schemas (each round filled again).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row, tuple_row

from bench.servers.postgres import PrivateCluster
from heartq.lifecycle.fate import succeeded
from heartq.model import NewJob, WorkerInfo
from heartq.store.postgres.store import PostgresStore
from heartq.store.sql.base import migration_scripts

SETTINGS = {"fsync": "on"}
"""Over PrivateCluster's own (`fsync = off`): PostgreSQL's defaults otherwise
(`maintenance_work_mem` 64 MB, `shared_buffers` 128 MB, autovacuum on)."""

TABLES = ("jobs", "ended_executions", "job_dependencies", "job_tails", "pruned_successes")

# Every 1,000 jobs (by `i % 1000`): 959 succeeded (one in 33 after a failed attempt, one
# in 20 the next step of a pipeline: an edge to the job before it), 10 dead after 4
# failed attempts, 5 cancelled before they ran, 20 queued (4 of them delayed, 2 with a
# concurrency key, 1 with a rate key), 1 running, 4 waiting for a queued and a running
# job, 1 blocked by a dead one. Ids are UUIDv7-shaped, 20 ms apart, in creation order.
JOB_ID = """
CREATE FUNCTION pg_temp.jid(ms bigint, i bigint) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-7' || lpad(to_hex(i % 4096), 3, '0')
           || '-' || to_hex(8 + i % 4) || substr(r, 1, 3) || '-' || substr(r, 4, 12)
    FROM (SELECT lpad(to_hex(ms), 12, '0') AS h, md5(i::text) AS r) AS x
$$
"""

FILL_JOBS = """
INSERT INTO jobs (id, task, queue, args, priority, status, run_at, attempts, max_retries,
                  retry_backoff, retry_backoff_max, worker_id, execution_id, lease_expires_at,
                  heartbeat_at, result, error, dead_reason, created_at, started_at,
                  finished_at, updated_at, waiting_for, holders, on_dependency_failure,
                  concurrency_key, concurrency_limit, rate_key, rate_limit, rate_period)
SELECT pg_temp.jid(%(base)s + i * 20, i),
       'tasks.' || (ARRAY['send_email', 'resize_image', 'sync_account', 'charge',
                          'report'])[1 + i %% 5],
       CASE WHEN i %% 7 = 0 THEN 'low' ELSE 'default' END,
       json_build_object('user_id', i %% 100000, 'template', 'welcome', 'key', md5(i::text)),
       0, status,
       created + CASE WHEN k BETWEEN 990 AND 993 THEN interval '1 day' ELSE interval '0' END,
       CASE status WHEN 'succeeded' THEN 1 + (i %% 33 = 0)::int WHEN 'dead' THEN 4
                   WHEN 'running' THEN 1 ELSE 0 END,
       3, 5, 3600,
       CASE WHEN status IN ('succeeded', 'dead', 'running') THEN 'worker-' || i %% 8 END,
       CASE status WHEN 'succeeded' THEN 1 + (i %% 33 = 0)::int WHEN 'dead' THEN 4
                   WHEN 'running' THEN 1 ELSE 0 END,
       CASE WHEN status = 'running' THEN now() + interval '30 seconds' END,
       CASE WHEN status = 'running' THEN now() END,
       CASE WHEN status = 'succeeded' THEN '{"sent": true}'::json END,
       CASE WHEN status = 'dead' THEN 'Traceback (most recent call last): ... '
                                      || 'TimeoutError: upstream took too long' END,
       CASE WHEN status = 'dead' THEN 'retries_exhausted' END,
       created,
       CASE WHEN status IN ('succeeded', 'dead', 'running') THEN created + interval '1 second' END,
       CASE WHEN status IN ('succeeded', 'dead', 'cancelled')
            THEN created + interval '2 seconds' END,
       created + interval '2 seconds',
       CASE WHEN status = 'waiting' THEN 2 ELSE 0 END,
       (status = 'blocked')::int,
       CASE WHEN status IN ('waiting', 'blocked') THEN 'block' END,
       CASE WHEN k IN (974, 975) THEN 'account-' || i %% 50 END,
       CASE WHEN k IN (974, 975) THEN 2 END,
       CASE WHEN k = 976 THEN 'partner-api' END,
       CASE WHEN k = 976 THEN 10 END,
       CASE WHEN k = 976 THEN 1.0 END
FROM (
    SELECT i, i %% 1000 AS k,
           to_timestamp((%(base)s + i * 20) / 1000.0) AS created,
           CASE WHEN i %% 1000 < 959 THEN 'succeeded'
                WHEN i %% 1000 < 969 THEN 'dead'
                WHEN i %% 1000 < 974 THEN 'cancelled'
                WHEN i %% 1000 < 994 THEN 'queued'
                WHEN i %% 1000 = 994 THEN 'running'
                WHEN i %% 1000 < 999 THEN 'waiting'
                ELSE 'blocked' END AS status
    FROM generate_series(1, %(jobs)s::bigint) AS i
) AS g
"""

# Each finished attempt: a succeeded job's one (after a failed one, one in 33), a dead
# job's four failures.
FILL_EXECUTIONS = """
INSERT INTO ended_executions (job_id, execution_id, worker_id, started_at, ended_at,
                              outcome, error)
SELECT j.id, e, j.worker_id, j.started_at, j.finished_at,
       CASE WHEN j.status = 'succeeded' AND e = j.attempts THEN 'succeeded' ELSE 'failed' END,
       CASE WHEN j.status = 'succeeded' AND e = j.attempts THEN NULL
            ELSE 'TimeoutError: upstream took too long' END
FROM jobs AS j, generate_series(1, j.attempts) AS e
WHERE j.status IN ('succeeded', 'dead')
"""

FILL_EDGES = """
INSERT INTO job_dependencies (job_id, depends_on, position, ended, holds)
SELECT pg_temp.jid(%(base)s + i * 20, i), pg_temp.jid(%(base)s + d * 20, d), position,
       ended, holds
FROM generate_series(1, %(jobs)s::bigint) AS i,
     LATERAL (VALUES
         (i - 1, 0, 'succeeded', false, i > 1 AND i %% 20 = 1 AND i %% 1000 < 959),
         (i - 21, 0, NULL, false, i %% 1000 BETWEEN 995 AND 998),
         (i - (i %% 1000 - 994), 1, NULL, false, i %% 1000 BETWEEN 995 AND 998),
         (i - 35, 0, 'dead', true, i %% 1000 = 999)
     ) AS x(d, position, ended, holds, wanted)
WHERE x.wanted AND x.d >= 1
"""

MARK_DEPENDED_ON = """
UPDATE jobs SET has_dependents = true
WHERE id IN (SELECT depends_on FROM job_dependencies)
"""

# Queued jobs of the ready log (schema v26 on: runnable, without a key, in their lane
# by the enqueuing transaction's id), the newest ones: what a migration that copies the
# ready log (v40) copies.
FILL_READY = """
WITH lane AS (
    INSERT INTO lanes (queue, priority) VALUES ('default', 0) ON CONFLICT DO NOTHING
)
INSERT INTO jobs (id, task, queue, args, priority, status, run_at, max_retries,
                  retry_backoff, retry_backoff_max, created_at, updated_at, ready_xid)
SELECT pg_temp.jid(%(base)s + (%(jobs)s + i) * 20, %(jobs)s + i), 'tasks.send_email',
       'default', json_build_object('user_id', i %% 100000), 0, 'queued', now(), 3, 5, 3600,
       now(), now(), pg_current_xact_id()
FROM generate_series(1, %(ready)s::bigint) AS i
"""

# The trace of succeeded jobs the pruner deleted: a tenth as many, older than the jobs.
FILL_PRUNED = """
INSERT INTO pruned_successes (id)
SELECT pg_temp.jid(%(base)s - %(pruned)s * 20 + i * 20, %(jobs)s + i)
FROM generate_series(1, %(pruned)s::bigint) AS i
"""


@dataclass
class Round:
    """One round's figures."""

    jobs: int
    fill_seconds: float
    rows: dict[str, int]
    bytes_before: dict[str, int]
    migrate_seconds: float
    wal_bytes: int
    version_before: int
    version_after: int
    works_after: bool


def store_before(url: str, to: int) -> PostgresStore:
    """heartq as it was before migration `to`: a store that knows the migrations below it
    only."""

    store = PostgresStore(url)
    scripts = migration_scripts("heartq.store.postgres")
    earlier = [(version, script) for version, script in scripts if version < to]
    store.dialect.migrations = lambda: earlier  # type: ignore[method-assign]
    return store


def table_of(conn: psycopg.Connection[Any], schema: str, table: str) -> str | None:
    """The table `table` names in `schema`: the jobs are `job_documents` from schema v39
    on (`jobs` is a view of it then); None for a table the schema has not (or no longer:
    `job_tails` until v42)."""
    cursor = conn.cursor(row_factory=tuple_row)
    for name in ("job_documents", table) if table == "jobs" else (table,):
        found = cursor.execute("SELECT to_regclass(%s)", (f"{schema}.{name}",)).fetchone()
        if found and found[0] is not None:
            return name
    return None


def written_to(statement: str, documents: str) -> str:
    """`statement` writing the jobs' table `documents`: from schema v40 on `jobs` is a
    view of several tables, which takes no INSERT or UPDATE. (A job these statements
    fill as running has no lease row there: the migrations timed never read one.)"""
    for verb in ("INSERT INTO", "UPDATE"):
        statement = statement.replace(f"{verb} jobs ", f"{verb} {documents} ")
    return statement


def fill(url: str, schema: str, jobs: int, ready: int) -> float:
    """The schema's tables filled (see the statements above) in one transaction, with
    `ready` more queued jobs in the ready log, then vacuumed, analysed and
    checkpointed; the seconds it took."""
    started = time.monotonic()
    base = int(time.time() * 1000) - jobs * 20 - 3_600_000
    params = {"base": base, "jobs": jobs, "pruned": jobs // 10, "ready": ready}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("SET search_path = {}").format(psycopg.sql.Identifier(schema)))
        with conn.transaction():
            conn.execute(JOB_ID)
            documents = table_of(conn, schema, "jobs") or "jobs"
            for statement in (FILL_JOBS, FILL_EXECUTIONS, FILL_EDGES, MARK_DEPENDED_ON,
                              FILL_PRUNED, *([FILL_READY] if ready else [])):  # fmt: skip
                conn.execute(written_to(statement, documents), params)
        for table in TABLES:
            if (found := table_of(conn, schema, table)) is not None:
                name = psycopg.sql.Identifier(found)
                conn.execute(psycopg.sql.SQL("VACUUM ANALYZE {}").format(name))
        conn.execute("CHECKPOINT")
    return time.monotonic() - started


def census(url: str, schema: str) -> tuple[dict[str, int], dict[str, int]]:
    """Each table's rows, and its bytes with its indexes."""
    rows: dict[str, int] = {}
    sizes: dict[str, int] = {}
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        for table in TABLES:
            if (found := table_of(conn, schema, table)) is None:
                continue
            name = psycopg.sql.Identifier(schema, table)
            count = conn.execute(psycopg.sql.SQL("SELECT count(*) AS n FROM {}").format(name))
            rows[table] = int(count.fetchone()["n"])  # type: ignore[index]
            size = conn.execute(
                "SELECT pg_total_relation_size(%(t)s::regclass) AS b",
                {"t": f"{schema}.{found}"},
            )
            sizes[table] = int(size.fetchone()["b"])  # type: ignore[index]
    return rows, sizes


def wal_position(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
    return int(row[0])  # type: ignore[index]


def works(url: str) -> bool:
    """The upgraded queue takes a new job, claims it and finishes it."""
    store = PostgresStore(url)
    try:
        store.register_worker(WorkerInfo("bench-w", "bench", os.getpid(), ("bench",), 1))
        (job_id,) = store.enqueue([NewJob(task="t", args_json="{}", queue="bench")])
        claimed = store.claim("bench-w", ["bench"], 1, 30.0)
        finished = store.finish([succeeded(job, "1") for job in claimed]) == []
        return finished and [job.id for job in claimed] == [job_id]
    finally:
        store.link.close()


def one_round(cluster: PrivateCluster, number: int, jobs: int, to: int, ready: int) -> Round:
    schema = f"upgrade_{number}"
    url = f"{cluster.url}?schema={schema}"
    old = store_before(url, to)
    try:
        version_before = old.link.migrate()
    finally:
        old.link.close()
    fill_seconds = fill(cluster.url, schema, jobs, ready)
    rows, sizes = census(cluster.url, schema)
    wal_start = wal_position(cluster.url)
    started = time.monotonic()
    new = PostgresStore(url)
    try:
        version_after = new.link.migrate()
        migrate_seconds = time.monotonic() - started
    finally:
        new.link.close()
    wal_bytes = wal_position(cluster.url) - wal_start
    return Round(jobs, fill_seconds, rows, sizes, migrate_seconds, wal_bytes, version_before,
                 version_after, works(url))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument(
        "--to", type=int, default=23, help="the migration timed (from the one before)"
    )
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--ready", type=int, default=0,
        help="queued jobs of the ready log added to the fill (--to 27 to 40: from v40 on the"
        " log's entries live in `ready`, which the fill does not write)",
    )
    parser.add_argument("--quick", action="store_true", help="20,000 jobs: the code path")
    parser.add_argument("--json", action="store_true", help="print each round as JSON too")
    args = parser.parse_args()
    if args.ready and not 27 <= args.to <= 40:
        parser.error("--ready fills the ready log of schemas v26 to v39 (--to 27 to 40)")
    jobs = 20_000 if args.quick else args.jobs
    cluster = PrivateCluster(SETTINGS)
    try:
        with psycopg.connect(cluster.url) as conn:
            server = conn.execute(
                "SELECT current_setting('server_version') AS v, datcollate FROM pg_database"
                " WHERE datname = current_database()"
            ).fetchone()
        print(f"upgrade: PostgreSQL {server[0]}, database collation {server[1]},"  # type: ignore[index]
              f" {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
        for number in range(1, args.rounds + 1):
            result = one_round(cluster, number, jobs, args.to, args.ready)
            rows = ", ".join(f"{t} {n:,}" for t, n in result.rows.items())
            mb = sum(result.bytes_before.values()) / 1e6
            print(f"round {number}: v{result.version_before} -> v{result.version_after},"
                  f" {result.jobs:,} jobs (filled in {result.fill_seconds:.1f} s; {rows};"
                  f" {mb:,.0f} MB with indexes): migration {result.migrate_seconds:.2f} s,"
                  f" WAL {result.wal_bytes / 1e6:,.1f} MB; claims and finishes after:"
                  f" {'yes' if result.works_after else 'NO'}", flush=True)  # fmt: skip
            if args.json:
                print(json.dumps(result.__dict__))
            if not result.works_after or result.version_after < args.to:
                raise SystemExit(1)
    finally:
        cluster.close()


if __name__ == "__main__":
    main()
