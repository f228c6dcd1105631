"""Many workers on one PostgreSQL: 40 worker processes at concurrency 25, 20,000 jobs.

Runs on a private cluster of its own (initdb in a temporary directory, `max_connections`
600, fsync on), never the machine's shared server, which other clients share (40 workers
hold up to 3 connections each: 120). Each job records the worker that ran it; the run
checks that every job succeeded once (one execution, attempt 1: none lost, none
doubled) and that no worker logged an error, and samples the server's connections while
the fleet works:

    .venv/bin/python -m bench.fleet --workers 40 --concurrency 25 --jobs 20000
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg

from heartq.app import App
from tests.pg_harness import PrivateCluster

TASKS = """
import heartq
app = heartq.App()

@app.task
def noop() -> None:
    return None
"""
CHECK = """
SELECT count(*) FILTER (WHERE status = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE status <> 'succeeded') AS other,
       count(*) FILTER (WHERE attempts <> 1) AS retried,
       (SELECT count(*) FROM heartq.executions) AS executions
FROM heartq.jobs
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=40)
    parser.add_argument("--concurrency", type=int, default=25)
    parser.add_argument("--jobs", type=int, default=20_000)
    args = parser.parse_args()
    cluster = PrivateCluster({"max_connections": "600", "fsync": "on"})
    try:
        _wait_for(cluster.url)
        run(cluster.url, args.workers, args.concurrency, args.jobs)
    finally:
        cluster.close()


def run(url: str, workers: int, concurrency: int, jobs: int) -> None:
    app = App(url)
    app.migrate()
    for offset in range(0, jobs, 1000):
        app.enqueue_many("noop", [{}] * min(1000, jobs - offset))
    app.close()
    peak = [0]
    stop = threading.Event()
    sampler = threading.Thread(target=_sample_connections, args=(url, peak, stop))
    with tempfile.TemporaryDirectory(prefix="heartq-fleet-") as tmp:
        (Path(tmp) / "fleet_tasks.py").write_text(TASKS)
        env = dict(os.environ, PYTHONPATH=tmp)
        command = [sys.executable, "-m", "heartq", "worker", "fleet_tasks:app", "--url", url,
                   "--burst", "--concurrency", str(concurrency)]  # fmt: skip
        logs = [Path(tmp) / f"w{i}.log" for i in range(workers)]
        started = time.perf_counter()
        sampler.start()
        procs = [
            subprocess.Popen(command, env=env, stderr=log.open("w"), stdout=subprocess.DEVNULL)
            for log in logs
        ]
        codes = [proc.wait(600) for proc in procs]
        elapsed = time.perf_counter() - started
        stop.set()
        sampler.join()
        errors = [line for log in logs for line in log.read_text().splitlines()
                  if " error " in line or "Traceback" in line]  # fmt: skip
    with psycopg.connect(url) as conn:
        row = conn.execute(CHECK).fetchone()
    assert row is not None
    succeeded, other, retried, executions = row
    print(f"workers            {workers} processes x concurrency {concurrency}")
    print(f"jobs               {jobs:,}: {succeeded:,} succeeded, {other} not, "
          f"{retried} with more than one attempt, {executions:,} executions")  # fmt: skip
    print(f"exit codes         {sorted(set(codes))}; error lines logged: {len(errors)}")
    for line in errors[:5]:
        print(f"  {line}")
    print(f"elapsed            {elapsed:.1f} s incl. startup ({jobs / elapsed:,.0f} jobs/s)")
    print(f"connections        peak {peak[0]} on the server ({peak[0] / workers:.1f} per worker)")


def _sample_connections(url: str, peak: list[int], stop: threading.Event) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        while not stop.is_set():
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
            ).fetchone()
            peak[0] = max(peak[0], int(row[0]) - 1 if row else 0)
            stop.wait(0.2)


def _wait_for(url: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            psycopg.connect(url, connect_timeout=2).close()
            return
        except psycopg.Error:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


if __name__ == "__main__":
    main()
