"""One worker's throughput with a long queue against a short one (100,000 vs 1,000,000).

Fills a fresh store with N no-op jobs, starts one `heartq worker` (thread pool x 50) and
times its first `--count` completions: from its first handler entry (stamped as in
`python -m bench`) until `--count` jobs are committed succeeded (polled every 0.2 s),
then stops it with SIGTERM. Both backends, each as filled (statistics as autovacuum or
nothing left them) and after an explicit VACUUM ANALYZE (`--vacuum`), because a claim
plan chosen from stale statistics is the way a backlog slows a queue down. The rate
with each backlog is printed with its ratio to the smallest backlog's; never asserted:

    .venv/bin/python -m bench.backlog --backlogs 100000 1000000 --count 20000
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from bench.contenders.common import Stamps
from heartq.app import App

TASKS = """
import os
import heartq
from bench.contenders.common import Stamps

app = heartq.App()
stamps = Stamps(os.environ["HEARTQ_BENCH_DIR"])

@app.task
def noop() -> None:
    stamps.entered()
"""
ROOT = Path(__file__).resolve().parent.parent


def measure(url: str, backlog: int, count: int, scratch: Path, vacuum: bool = False) -> float:
    """Jobs/s of one worker over its first `count` jobs with `backlog` queued (after a
    VACUUM ANALYZE of the store's tables if `vacuum`)."""
    app = App(url)
    app.migrate()
    for offset in range(0, backlog, 10_000):
        app.enqueue_many("noop", [{}] * min(10_000, backlog - offset))
    if vacuum:
        _vacuum_analyze(url)
    (scratch / "backlog_tasks.py").write_text(TASKS)
    env = dict(os.environ, HEARTQ_BENCH_DIR=str(scratch),
               PYTHONPATH=os.pathsep.join([str(scratch), str(ROOT)]))  # fmt: skip
    worker = subprocess.Popen(
        [sys.executable, "-m", "heartq", "worker", "backlog_tasks:app", "--url", url,
         "--concurrency", "50"],
        env=env, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 600
        while _succeeded(url) < count:
            if time.monotonic() > deadline or worker.poll() is not None:
                raise RuntimeError("the worker did not get through the jobs")
            time.sleep(0.2)
        done_at = time.time()
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)
        app.close()
    return count / (done_at - Stamps(str(scratch)).first_entry())


def _vacuum_analyze(url: str) -> None:
    """VACUUM and ANALYZE the store's tables, as an operator or autovacuum would."""
    if url.startswith("sqlite"):
        conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        try:
            conn.execute("VACUUM")
            conn.execute("ANALYZE")
        finally:
            conn.close()
        return
    base, schema = url.split("?schema=")
    with psycopg.connect(base, autocommit=True) as pg:
        for table in ("jobs", "ended_executions"):  # `executions` is a view (v17)
            pg.execute(f"VACUUM ANALYZE {schema}.{table}")  # type: ignore[arg-type]


SUCCEEDED = "SELECT count(*) FROM {table} WHERE status = 'succeeded' AND finished_at IS NOT NULL"


def _succeeded(url: str) -> int:
    """Jobs committed succeeded (through the finished index: cheap at any backlog)."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            row = conn.execute(SUCCEEDED.format(table="heartq_jobs")).fetchone()
    else:
        base, schema = url.split("?schema=")
        with psycopg.connect(base) as pg:
            row = pg.execute(SUCCEEDED.format(table=f"{schema}.jobs")).fetchone()  # type: ignore[arg-type]
    return int(row[0]) if row else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlogs", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--backends", nargs="+", default=["sqlite", "postgresql"])
    parser.add_argument(
        "--vacuum",
        choices=["no", "yes", "both"],
        default="both",
        help="VACUUM ANALYZE after filling: without, with, or one run each",
    )
    parser.add_argument("--server", default="postgresql://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    vacuums = {"no": [False], "yes": [True], "both": [False, True]}[args.vacuum]
    rates: dict[tuple[str, bool], list[float]] = {}
    for backlog in args.backlogs:
        for vacuum in vacuums:
            for backend in args.backends:
                rate = run_one(backend, backlog, args.count, vacuum, args.server)
                rates.setdefault((backend, vacuum), []).append(rate)
                state = "after VACUUM ANALYZE" if vacuum else "as filled"
                ratio = rate / rates[(backend, vacuum)][0]
                print(f"{backend:<10} {backlog:>9,} queued, {state:<20}: {rate:,.0f} jobs/s "
                      f"({ratio:.2f} of {args.backlogs[0]:,} queued; first {args.count:,} "
                      "jobs, one worker)", flush=True)  # fmt: skip


def run_one(backend: str, backlog: int, count: int, vacuum: bool, server: str) -> float:
    """One measurement in a fresh store (a temporary SQLite file or PostgreSQL schema)."""
    with tempfile.TemporaryDirectory(prefix="heartq-backlog-") as tmp:
        scratch = Path(tmp)
        if backend == "sqlite":
            return measure(f"sqlite:///{scratch / 'q.db'}", backlog, count, scratch, vacuum)
        schema = f"bench_backlog_{os.getpid()}"
        try:
            return measure(f"{server}?schema={schema}", backlog, count, scratch, vacuum)
        finally:
            with psycopg.connect(server, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
