"""What the fleet benchmarks share: their sizes, the workers' tasks, a fleet of worker
processes on a private cluster's database, and the bench's own reads of that database
(`bench.fleet`'s processing, `bench.fleet_io`'s jobs that wait on I/O)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from bench import fleet_stats as stats
from bench.worker_processes import WorkerProcesses

ROOT = Path(__file__).resolve().parent.parent
M = stats.MARK
WORKER_APP = "heartq-fleet-worker"
"""The workers' `application_name` (libpq's PGAPPNAME): their connections, not the bench's."""
DONE = f"""{M} SELECT count(*) FROM heartq.jobs
WHERE status = 'succeeded' AND finished_at IS NOT NULL"""
CHECK = f"""{M}
SELECT count(*) FILTER (WHERE status = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE status <> 'succeeded') AS other,
       count(*) FILTER (WHERE attempts <> 1) AS retried,
       (SELECT count(*) FROM heartq.executions) AS executions,
       extract(epoch from max(finished_at) - min(started_at))::float8 AS span,
       count(DISTINCT worker_id) AS workers_used
FROM heartq.jobs
"""


@dataclass(frozen=True)
class Sizes:
    workers: int = 40
    baseline: int = 4
    concurrency: int = 25
    jobs: int = 20_000
    rounds: int = 2
    hold: float = 10.0
    window: float = 60.0
    sleep: float = 1.0
    """Seconds each job of the sleeping part waits (`bench.fleet_io.sleeping`)."""
    sleeping_jobs: int = 6_000
    """Jobs the sleeping part drains: six for each of the large fleet's slots."""
    sample_rate: float = 0.2
    """Share of statement executions the server logs with their duration."""
    heartbeat_interval: float | None = None
    """Workers' `--heartbeat-interval` (None: the default, 30 s)."""
    parts: str = "processing,sleeping,held"
    """The parts to run, comma-separated (`--parts sleeping`: that one alone)."""
    prefetch: int = 0
    """Workers' `--prefetch`: jobs each may claim ahead of its free slots (0: off, the
    default). Whether larger claims help a large fleet, whose few free slots per worker
    make small ones (they did not: BENCHMARKS.md, "A thousand slots")."""


FULL = Sizes()
QUICK = Sizes(
    workers=3,
    baseline=1,
    concurrency=4,
    jobs=300,
    rounds=1,
    hold=1.0,
    window=3.0,
    sleep=0.5,
    sleeping_jobs=48,
    sample_rate=1.0,
    heartbeat_interval=1.0,
)


@contextmanager
def fleet(url: str, scratch: Path, workers: int, sizes: Sizes) -> Iterator[WorkerProcesses]:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(scratch), str(ROOT)]), PGAPPNAME=WORKER_APP
    )
    command = [
        sys.executable,
        "-m",
        "heartq",
        "worker",
        "fleet_tasks:app",
        "--url",
        url,
        "--concurrency",
        str(sizes.concurrency),
        "--shutdown-timeout",
        "0",
    ]
    if sizes.heartbeat_interval:
        command += ["--heartbeat-interval", str(sizes.heartbeat_interval)]
    if sizes.prefetch:
        command += ["--prefetch", str(sizes.prefetch)]
    logs = [scratch / f"{url.rsplit('/', 1)[1]}-w{i}.log" for i in range(workers)]
    fleet = WorkerProcesses(command, env, logs)
    try:
        yield fleet
    finally:
        fleet.stop()


@dataclass
class Session:
    """A fleet at work on a fresh database, with the bench's two connections to it."""

    admin: psycopg.Connection[Any]
    """The cluster's maintenance database: statement statistics, commits."""
    watch: psycopg.Connection[Any]
    """The fleet's database: the bench's reads of its jobs and workers."""
    workers: WorkerProcesses


@contextmanager
def registered(
    server: str, url: str, scratch: Path, workers: int, sizes: Sizes
) -> Iterator[Session]:
    """`workers` worker processes on `url`, once every one has registered."""
    with (
        psycopg.connect(server, autocommit=True) as admin,
        psycopg.connect(url, autocommit=True) as watch,
        fleet(url, scratch, workers, sizes) as processes,
    ):
        until(lambda: active(watch) >= workers, 300, "every worker registered", processes)
        yield Session(admin, watch, processes)


def active(conn: psycopg.Connection[Any]) -> int:
    return count(conn, f"{M} SELECT count(*) FROM heartq.workers WHERE status = 'active'")


def running(conn: psycopg.Connection[Any]) -> int:
    return count(conn, f"{M} SELECT count(*) FROM heartq.jobs WHERE status = 'running'")


def count(conn: psycopg.Connection[Any], query: str) -> int:
    row = conn.execute(query).fetchone()
    return int(row[0]) if row else 0


def until(condition: Callable[[], bool], seconds: float, what: str, fleet: WorkerProcesses) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline or fleet.failed():
            raise RuntimeError(f"fleet: not reached within {seconds:g} s: {what}")
        time.sleep(0.2)


def database(server: str, name: str) -> str:
    drop(server, name)
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return f"{server.rsplit('/', 1)[0]}/{name}"


def drop(server: str, name: str) -> None:
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def wait_for(url: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            psycopg.connect(url, connect_timeout=2).close()
            return
        except psycopg.Error:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def load(before: float) -> list[float]:
    """The machine's 1-minute load average before and after a measurement: on a shared
    machine, what says how far its absolute figures can be trusted."""
    return [round(before, 1), round(os.getloadavg()[0], 1)]
