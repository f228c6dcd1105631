"""A run's sweep removes what dead runs left and never what a live run uses: the rule
that lets two suites run at once on one machine and one PostgreSQL server. In-process and
quick: the runs here are names (`RunId`), the processes `sleep`s marked with them. Runs
starting meanwhile (test_cleanup.py's) sweep too: the tests check what is left, not who
removed it."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from tests import leftovers, pg_harness
from tests.support import wait_for

A_DEAD_RUN = leftovers.RunId(os.getpid(), started=1)
"""This process's pid with another start time: a controller that is gone."""


@pytest.fixture
def sleepers() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait(10)


def sleeper(run: leftovers.RunId) -> subprocess.Popen[bytes]:
    """A process of `run` (in a session of its own, as the tests' workers are)."""
    return subprocess.Popen(
        ["sleep", "120"], env={**os.environ, leftovers.MARK: str(run)}, start_new_session=True
    )


def test_a_sweep_stops_the_processes_of_dead_runs_only(
    sleepers: list[subprocess.Popen[bytes]],
) -> None:
    assert leftovers.this_run().alive() and not A_DEAD_RUN.alive()
    sleepers += [sleeper(leftovers.this_run()), sleeper(A_DEAD_RUN)]
    live, dead = sleepers
    removed = leftovers.sweep_dead_runs()  # (or a run starting meanwhile: they sweep too)
    # what the sweep saw, said if the wait fails (it did once under the full suite)
    seen = {str(run): [p.pid for p in procs] for run, procs in leftovers.marked_processes().items()}
    what = f"the dead run's process {dead.pid} to stop (stopped {removed.processes}; marked {seen})"
    wait_for(lambda: dead.poll() is not None, 15, what)
    assert live.poll() is None


def _schema_exists(conn: psycopg.Connection[tuple[object, ...]], name: str) -> bool:
    found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (name,))
    return found.fetchone() is not None


def test_a_sweep_drops_the_schemas_of_dead_runs_only(pg_server_url: str) -> None:
    dead = f"hqt_{pg_harness.run_token(A_DEAD_RUN):08x}_{uuid.uuid4().hex[:12]}"
    with (
        pg_harness.schema_url(pg_server_url) as url,  # this run's: its lock is held
        psycopg.connect(pg_server_url, autocommit=True) as conn,
    ):
        live = url.rsplit("schema=", 1)[1]
        for name in (live, dead):
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        pg_harness.sweep_schemas(pg_server_url)  # (or a run starting meanwhile)
        assert not _schema_exists(conn, dead)
        assert _schema_exists(conn, live)


def _database_exists(conn: psycopg.Connection[tuple[object, ...]], name: str) -> bool:
    found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
    return found.fetchone() is not None


def test_a_sweep_drops_the_databases_of_dead_runs_only() -> None:
    """On a private cluster: a DROP DATABASE makes the server checkpoint at once, which on
    the shared server, beside a full run's writes, took 6-47 s (and slowed every test's
    I/O meanwhile); on a cluster of this test's own, a fraction of a second. The runs'
    locks and databases are the same there as on the shared server."""
    cluster = pg_harness.PrivateCluster()
    try:
        server = cluster.url
        wait_for(lambda: pg_harness.answers(server), 30, "the private cluster")
        dead = pg_harness.run_database(A_DEAD_RUN)
        pg_harness.run_database_url(server)  # this run's: its lock is held
        live = pg_harness.run_database(leftovers.this_run())
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dead)))
            with psycopg.connect(pg_harness.in_database(server, dead)):  # a session left
                pg_harness.sweep_databases(server)  # (or a run starting meanwhile)
            assert not _database_exists(conn, dead)
            assert _database_exists(conn, live)
    finally:
        held = pg_harness._owner_sessions.pop(server, None)  # the run's lock there
        if held is not None:
            held.close()
        cluster.close()
