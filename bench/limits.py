"""The raw limits under every contender, measured in the same run as they are.

- `pgbench`: a single-row UPDATE per transaction (a random row of 100,000), at 1 and 4
  clients: what this PostgreSQL commits per second, fsync included.
- SQLite: one-row INSERT transactions in WAL mode at `synchronous` NORMAL and FULL.
- The bare-statement ceiling: heartq's own claim and finish, through its store, in a
  loop from one process with no worker around them (no task call, no threads, no
  heartbeat): B jobs claimed, then the B finished in one fenced batch. What heartq's
  statements allow at best; a worker reaches a fraction of it.

Each returns operations per second (transactions for the raw limits, jobs for the
ceiling).
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
import time
import uuid
from pathlib import Path

import psycopg

from heartq.lifecycle import fate
from heartq.model import NewJob, WorkerInfo
from heartq.store import open_store

PGBENCH_SCRIPT = "\\set aid random(1, 100000)\nUPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :aid;\n"  # noqa: E501
PGBENCH_DATABASE = "heartq_bench_pgbench"


def pgbench(server: str, clients: int, seconds: float, scratch: Path) -> float:
    """Transactions/s of pgbench's single-row UPDATE (a database of its own)."""
    binary = shutil.which("pgbench") or _postgres_binary("pgbench")
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{PGBENCH_DATABASE}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{PGBENCH_DATABASE}"')
    url = _with_database(server, PGBENCH_DATABASE)
    try:
        subprocess.run([binary, "-i", "-q", "-s", "1", url], check=True, capture_output=True)
        script = scratch / "update.sql"
        script.write_text(PGBENCH_SCRIPT)
        run = subprocess.run(
            [binary, "-n", "-f", str(script), "-c", str(clients), "-j", str(clients),
             "-T", str(max(1, round(seconds))), url],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        found = re.search(r"tps = ([\d.]+)", run.stdout)
        if not found:
            raise RuntimeError(f"pgbench printed no tps: {run.stdout[-300:]}")
        return float(found.group(1))
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{PGBENCH_DATABASE}" WITH (FORCE)')


def sqlite_commits(synchronous: str, seconds: float, scratch: Path) -> float:
    """One-row INSERT transactions/s, WAL, at `synchronous` (NORMAL or FULL)."""
    path = scratch / f"commits-{synchronous.lower()}.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={synchronous}")
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
        count, deadline = 0, time.perf_counter() + seconds
        started = time.perf_counter()
        while time.perf_counter() < deadline:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t (v) VALUES (?)", ("x",))
            conn.execute("COMMIT")
            count += 1
        return count / (time.perf_counter() - started)
    finally:
        conn.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)


def ceiling(url: str, batch: int, jobs: int) -> float:
    """Jobs/s of heartq's claim + fenced finish statements in a loop, `batch` at a time."""
    store = open_store(url)
    try:
        store.link.migrate()
        store.enqueue([NewJob(task="noop", args_json="{}") for _ in range(jobs)])
        worker = WorkerInfo(id=f"ceiling-{uuid.uuid4().hex[:8]}", hostname="bench",
                            pid=0, queues=("default",), concurrency=batch)  # fmt: skip
        store.register_worker(worker)
        done, started = 0, time.perf_counter()
        while done < jobs:
            claimed = store.claim(worker.id, ["default"], batch, lease=30.0)
            if not claimed:
                break
            store.finish([fate.succeeded(job, None) for job in claimed])
            done += len(claimed)
        return done / (time.perf_counter() - started)
    finally:
        store.link.close()


def _with_database(server: str, database: str) -> str:
    base, _, query = server.partition("?")
    return f"{base.rsplit('/', 1)[0]}/{database}" + (f"?{query}" if query else "")


def _postgres_binary(name: str) -> str:
    found = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    if not found:
        raise RuntimeError(f"{name} not found (Debian's postgresql-client has it)")
    return str(found[-1])


def drop_schema(server: str, schema: str) -> None:
    """Remove a ceiling run's schema."""
    from psycopg import sql

    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
