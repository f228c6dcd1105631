"""Which updates of heartq's tables are heap-only (HOT), under load: `pg_stat_user_tables`.

An update that changes no indexed column and finds room on its row's page is heap-only:
no new index entry, and the old version is pruned without a vacuum. This runs two loads
on a fresh PostgreSQL database and prints, per table, the rows inserted, updated and
updated heap-only (`n_tup_ins`, `n_tup_upd`, `n_tup_hot_upd`) that each load caused:

- `bench`: `python -m bench`'s load, `--jobs` no-op jobs (enqueued in batches of 100)
  drained by 2 `heartq worker --burst --concurrency 50` processes;
- `long`: `--long` jobs of `--seconds` each, every one reporting progress every 0.5 s,
  run at once by one `--pool async` worker: heartbeats and pulses.

`--fillfactor N` sets the jobs table's fillfactor before the loads (the experiment
behind the choice in migration 0017). The statistics reach the view when each backend
flushes them (at the latest when it exits): the counts are read once they stop moving.
Figures printed, never asserted:

    .venv/bin/python bench/hot_updates.py --jobs 10000 --long 200 --seconds 8
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import psycopg

from heartq.app import App

DATABASE = "heartq_bench_hot"
TABLES = ("job_documents", "executions", "ended_executions")
TASKS = """
import asyncio
import heartq

app = heartq.App()

@app.task
def noop() -> None:
    pass

@app.task
async def hold(ctx: heartq.JobContext, seconds: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while loop.time() < deadline:
        await asyncio.sleep(0.5)
        ctx.heartbeat(progress=(loop.time() % 100) / 100, stage="holding")
"""
Counts = dict[str, tuple[int, int, int]]


def counts(url: str) -> Counts:
    """Per table of heartq's schema: (inserted, updated, updated heap-only), once two
    reads half a second apart agree (the backends' statistics flushed), at most 30 s."""
    deadline, last = time.monotonic() + 30, None
    while True:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            rows = conn.execute(
                "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables"
                " WHERE schemaname = 'heartq' AND relname = ANY(%s)",
                (list(TABLES),),
            ).fetchall()
        now = {str(r[0]): (int(r[1]), int(r[2]), int(r[3])) for r in rows}
        if now == last or time.monotonic() > deadline:
            return now
        last = now
        time.sleep(0.5)


def delta(before: Counts, after: Counts) -> Counts:
    zero = (0, 0, 0)
    return {
        t: tuple(a - b for a, b in zip(after[t], before.get(t, zero), strict=True))  # type: ignore[misc]
        for t in after
    }


def run(url: str, scratch: Path, app: App, jobs: int, long: int, seconds: float) -> None:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(scratch), os.environ.get("PYTHONPATH", "")])
    )
    worker = [sys.executable, "-m", "heartq", "worker", "hot_tasks:app", "--url", url, "--burst"]
    start = counts(url)
    for offset in range(0, jobs, 100):
        app.enqueue_many("noop", [{}] * min(100, jobs - offset))
    procs = [
        subprocess.Popen([*worker, "--concurrency", "50"], env=env, stderr=subprocess.DEVNULL)
        for _ in range(2)
    ]
    for proc in procs:
        proc.wait(600)
    after_bench = counts(url)
    app.enqueue_many("hold", [{"seconds": seconds}] * long)
    proc = subprocess.Popen(
        [*worker, "--pool", "async", "--concurrency", str(long)], env=env, stderr=subprocess.DEVNULL
    )
    proc.wait(600)
    after_long = counts(url)
    for name, d in (("bench", delta(start, after_bench)), ("long", delta(after_bench, after_long))):
        for table in TABLES:
            if table in d:
                ins, upd, hot = d[table]
                share = f"{hot / upd:.1%}" if upd else "n/a"
                print(f"{name:>5} {table:>16}: inserted {ins:>7,}, updated {upd:>7,}, "
                      f"heap-only {hot:>7,} ({share})", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--long", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--fillfactor", type=int, default=None)
    parser.add_argument("--server", default="postgresql://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # enqueues before a worker declared the tasks: expected
    with psycopg.connect(args.server, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{DATABASE}"')
    url = f"{args.server.rsplit('/', 1)[0]}/{DATABASE}"
    try:
        app = App(url)
        app.migrate()
        if args.fillfactor is not None:
            with psycopg.connect(url, autocommit=True) as conn:
                fillfactor = int(args.fillfactor)
                conn.execute(f"ALTER TABLE heartq.job_documents SET (fillfactor = {fillfactor})")
        with tempfile.TemporaryDirectory(prefix="heartq-hot-") as tmp:
            (Path(tmp) / "hot_tasks.py").write_text(TASKS)
            run(url, Path(tmp), app, args.jobs, args.long, args.seconds)
        app.close()
    finally:
        with psycopg.connect(args.server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')


if __name__ == "__main__":
    main()
