"""What 2,000 running jobs cost the database, against 1: commits/s and the worker's RSS.

For each N: a fresh PostgreSQL database, N jobs that each sleep for the whole window,
one `heartq worker --pool async --concurrency N` at default protocol settings. Once all
N run, the database's committed transactions (`pg_stat_database.xact_commit`, this
database only) are counted over `--window` seconds (several heartbeat intervals), with
the worker's RSS at the end. With `--report-every S` (several values: one run each),
every job also reports progress (`ctx.heartbeat(progress=...)`) every S seconds, so the
cost of the pulse shows apart (0: silent jobs). Figures printed, never asserted:

    .venv/bin/python bench/heartbeat_load.py --running 1 2000 --window 65 --report-every 0 0.5
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
async def hold(ctx: heartq.JobContext, seconds: float, report_every: float = 0.0) -> None:
    if not report_every:
        await asyncio.sleep(seconds)
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while loop.time() < deadline:
        await asyncio.sleep(report_every)
        ctx.heartbeat(progress=(loop.time() % 100) / 100, stage="holding")
"""


def measure(
    server: str, running: int, window: float, scratch: Path, report_every: float = 0.0
) -> tuple[float, float]:
    """(commits/s over the window, worker RSS in MiB) with `running` jobs held, each
    reporting progress every `report_every` seconds (0: never)."""
    url = _database_url(server)
    app = App(url)
    app.migrate()
    job = {"seconds": window + 120, "report_every": report_every}
    app.enqueue_many("hold", [job] * running)
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
    parser.add_argument("--report-every", type=float, nargs="+", default=[0.0])
    parser.add_argument("--server", default="postgresql://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    try:
        for every in args.report_every:
            for running in args.running:
                with tempfile.TemporaryDirectory(prefix="heartq-hb-") as tmp:
                    rate, rss = measure(args.server, running, args.window, Path(tmp), every)
                reports = f"each reporting every {every:g} s" if every else "silent"
                print(f"{running:>5} running ({reports}): {rate:.2f} commits/s over "
                      f"{args.window:g} s, worker RSS {rss:.0f} MiB", flush=True)  # fmt: skip
    finally:
        with psycopg.connect(args.server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')


if __name__ == "__main__":
    main()
