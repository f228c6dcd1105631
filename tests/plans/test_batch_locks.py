"""How PostgreSQL's batch statements take their row locks: in id order, and
through the primary key under a prepared statement's generic plan too.

Why both: a heartbeat and a finish of one worker touch the same jobs at once; if each
locked in the order its batch came in, two batches with opposite orders would each hold
a row the other needs ("deadlock detected", one of them lost). And a worker's batches
run as prepared statements: after a few executions PostgreSQL may keep a generic plan,
which estimates an array parameter at 10 rows whatever it holds; such a plan once
rescanned the whole batch for each row it locked (twice a finish's instructions at 100
jobs; caught by callgrind, not by a plan read with its parameters known)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from heartq.model import NewJob
from heartq.store.postgres import PostgresStore
from heartq.store.postgres import queries as pg_q
from heartq.store.postgres.connection import parse_url
from heartq.store.postgres.statements import positional
from tests.plans.batches import assert_probes_the_keys, batch_params

BATCHED = ["FINISH", "RELEASE", "HEARTBEAT", "PULSE", "START_AHEAD"]

# Ids whose order as numbers differs from the order they were enqueued in.
IDS = [f"{i % 2:08x}-0000-7000-8000-{i:012x}" for i in range(26)]


@pytest.fixture
def claimed(pg_schemas: Any) -> Iterator[tuple[PostgresStore, list[Any]]]:
    """A migrated schema with `IDS` enqueued and claimed by worker `w`."""
    url = str(pg_schemas.take())
    pg = PostgresStore(url)
    try:
        pg.enqueue([NewJob("t", "{}", id=job_id) for job_id in IDS])
        jobs = pg.claim("w", ["default"], len(IDS), lease=60)
        assert sorted(j.lease.job_id for j in jobs) == sorted(IDS)
        yield pg, jobs
    finally:
        pg.link.close()
        pg_schemas.drop_behind(url)


def _connect(pg: PostgresStore, autocommit: bool = False) -> psycopg.Connection[Any]:
    """A connection of its own to `pg`'s schema."""
    conninfo, schema = parse_url(pg.dialect.url)
    conn = psycopg.connect(conninfo, autocommit=autocommit)
    conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
    return conn


def _wait_for_lock_wait(
    pg: PostgresStore, pid: int, xid: str, runner: threading.Thread, deadline: float
) -> None:
    """Until backend `pid` waits for transaction `xid` (the holder's row lock)."""
    with _connect(pg, autocommit=True) as conn:
        while time.monotonic() < deadline and runner.is_alive():
            row = conn.execute(
                "SELECT 1 FROM pg_locks WHERE pid = %s AND locktype = 'transactionid'"
                " AND transactionid::text = %s AND NOT granted",
                [pid, xid],
            ).fetchone()
            if row:
                return
            time.sleep(0.01)
    raise AssertionError(f"the batch statement (pid {pid}) never waited for a row lock")


@pytest.mark.parametrize("name", BATCHED)
def test_a_batch_locks_its_rows_in_id_order(
    claimed: tuple[PostgresStore, list[Any]], name: str
) -> None:
    """A batch given in reverse order, stopped at a row another transaction holds, holds
    exactly the rows before it in id order, none after: whatever order a batch comes in,
    two batches over the same rows wait for each other instead of deadlocking."""
    pg, jobs = claimed
    ordered = sorted(IDS)  # a uuid's order is its text's, in lower case
    middle = ordered[len(ordered) // 2]
    params = batch_params(pg, sorted(jobs, key=lambda j: j.lease.job_id, reverse=True))
    if name == "START_AHEAD":  # else, planned by a seq scan (statistics of an empty
        # table: another test's database-wide ANALYZE), it tests `claimed_ahead` first
        # and never runs its lock step
        with _connect(pg) as conn:
            conn.execute("UPDATE leases SET claimed_ahead = true")
    with _connect(pg) as holder, _connect(pg) as batch:
        holder.execute("SELECT 1 FROM leases WHERE job_id = %s FOR UPDATE", [middle])
        xid = str(holder.execute("SELECT pg_current_xact_id()::xid").fetchone()[0])
        pid = batch.info.backend_pid
        failure: list[BaseException] = []

        def run() -> None:
            try:
                batch.execute(getattr(pg_q, name), params)
            except psycopg.Error as error:  # reported by the test's thread
                failure.append(error)

        runner = threading.Thread(target=run)
        runner.start()
        try:
            _wait_for_lock_wait(pg, pid, xid, runner, time.monotonic() + 30)
            with _connect(pg) as probe:
                free = {
                    str(row[0])
                    for row in probe.execute(
                        "SELECT job_id FROM leases WHERE job_id = ANY(%s::uuid[])"
                        " FOR UPDATE SKIP LOCKED",
                        [IDS],
                    )
                }
                probe.rollback()
        finally:
            holder.rollback()
            runner.join(30)
        batch.rollback()
    assert not failure, failure
    held = set(IDS) - free - {middle}
    assert held == set(ordered[: ordered.index(middle)])


@pytest.mark.parametrize("name", BATCHED)
def test_a_batch_probes_the_primary_key_under_a_generic_plan(
    claimed: tuple[PostgresStore, list[Any]], name: str
) -> None:
    """Prepared on one of heartq's own sessions (its generic plan forced, its planner's
    settings), each batch statement still locks its rows with one probe of the primary
    key per batch row (`assert_probes_the_keys`), and reads no table whole."""
    pg, jobs = claimed
    params = batch_params(pg, jobs)
    text, names = positional(getattr(pg_q, name))
    with pg.link.pool.transaction() as conn:
        conn.execute(sql.SQL("PREPARE batch AS {}").format(sql.SQL(text)))
        values = sql.SQL(", ").join(sql.Literal(params[n]) for n in names)
        explain = sql.SQL("EXPLAIN (ANALYZE, COSTS OFF) EXECUTE batch ({})").format(values)
        plan = "\n".join(row["QUERY PLAN"] for row in conn.execute(explain))
        conn.rollback()
        conn.execute("DEALLOCATE batch")
    assert_probes_the_keys(name, plan, len(jobs))
    assert "Seq Scan on job_documents" not in plan and "Seq Scan on leases" not in plan, plan
