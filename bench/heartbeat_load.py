"""What 2,000 running jobs cost the database, against 1: commits/s and the worker's RSS.

For each N: a fresh PostgreSQL database, N jobs that each sleep for the whole window,
one `heartq worker --pool async --concurrency N` at default protocol settings. Once all
N run, the database's committed transactions (`pg_stat_database.xact_commit`, this
database only) are counted over `--window` seconds (several heartbeat intervals), with
the worker's RSS at the end. Figures printed, never asserted:

    .venv/bin/python bench/heartbeat_load.py --running 1 2000 --window 65
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from heartq.app import App

DATABASE = "heartq_bench_heartbeat"
TASKS = """
import asyncio
import heartq

app = heartq.App()

@app.task
async def hold(seconds: float) -> None:
    await asyncio.sleep(seconds)
"""


def measure(server: str, running: int, window: float, scratch: Path) -> tuple[float, float]:
    """(commits/s over the window, worker RSS in MiB) with `running` jobs held."""
    url = _database_url(server)
    app = App(url)
    app.migrate()
    app.enqueue_many("hold", [{"seconds": window + 120}] * running)
    (scratch / "hb_tasks.py").write_text(TASKS)
    worker = subprocess.Popen(
        [sys.executable, "-m", "heartq", "worker", "hb_tasks:app", "--url", url,
         "--pool", "async", "--concurrency", str(running)],
        env=dict(os.environ, PYTHONPATH=str(scratch)), stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while _running(app) < running:
            if time.monotonic() > deadline or worker.poll() is not None:
                raise RuntimeError(f"the worker did not start all {running} jobs")
            time.sleep(0.5)
        time.sleep(2)  # let the claim's commits reach the statistics
        before, started = _commits(server), time.monotonic()
        time.sleep(window)
        after, elapsed = _commits(server), time.monotonic() - started
        rss = _rss_mib(worker.pid)
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(30)
        app.close()
    return (after - before) / elapsed, rss


def _database_url(server: str) -> str:
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{DATABASE}"')
    return f"{server.rsplit('/', 1)[0]}/{DATABASE}"


def _running(app: App) -> int:
    return sum(n for _, status, n in app.store.count_jobs() if status == "running")


def _commits(server: str) -> int:
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (DATABASE,)
        ).fetchone()
    return int(row[0]) if row else 0


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--running", type=int, nargs="+", default=[1, 2000])
    parser.add_argument("--window", type=float, default=65.0)
    parser.add_argument("--server", default="postgresql://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    try:
        for running in args.running:
            with tempfile.TemporaryDirectory(prefix="heartq-hb-") as tmp:
                rate, rss = measure(args.server, running, args.window, Path(tmp))
            print(f"{running:>5} running: {rate:.2f} commits/s over {args.window:g} s, "
                  f"worker RSS {rss:.0f} MiB", flush=True)  # fmt: skip
    finally:
        with psycopg.connect(args.server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')


if __name__ == "__main__":
    main()
