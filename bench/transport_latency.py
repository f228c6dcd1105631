"""`python -m bench.transport_latency`: enqueue-to-start latency with the NATS transport
against database polling (docs/NATS.md).

For each backend (SQLite file, a fresh schema on PostgreSQL) and each mode (`poll`: the
default fetch loop, `--poll-interval 1`, PostgreSQL's NOTIFY and all; `nats`: the same
worker with `--transport`), one worker process (`heartq worker`, concurrency 4) runs
`--jobs` no-op jobs enqueued one at a time from another process's `App`, at random
intervals (20-120 ms), so each job meets an idle worker. Latency is the database's
`started_at - created_at` of each job's execution (one clock, the database's). The
JetStream server is the one on 127.0.0.1:4222 if it answers, else a private one
(`bench/servers/jetstream.py`); each run has its own stream, deleted after. PostgreSQL
is `--postgres` (the machine's server by default), in a schema of the run's own, dropped
after. Needs heartq's nats and postgres extras.

    .venv/bin/python -m bench.transport_latency --jobs 200
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import heartq
from bench.limits import drop_schema
from bench.servers import jetstream
from heartq.store import open_store

SERVER = "postgresql://postgres@127.0.0.1:5432/test"

TASKS = textwrap.dedent(
    """
    import heartq

    app = heartq.App()


    @app.task
    def noop():
        return None
    """
)


@contextlib.contextmanager
def database(backend: str, directory: Path, server: str) -> Iterator[str]:
    """A SQLite file in `directory`, or a fresh schema on `server`, dropped after."""
    if backend == "sqlite":
        yield f"sqlite:///{directory / 'heartq.db'}"
        return
    schema = f"bench_latency_{uuid.uuid4().hex[:12]}"
    try:
        yield f"{server}{'&' if '?' in server else '?'}schema={schema}"
    finally:
        drop_schema(server, schema)


def run(backend: str, mode: str, jobs: int, address: str, server: str) -> dict[str, float]:
    """One worker, `jobs` jobs enqueued one by one; latency percentiles in ms."""
    with tempfile.TemporaryDirectory() as tmp, database(backend, Path(tmp), server) as url:
        directory = Path(tmp)
        (directory / "tasks.py").write_text(TASKS)
        store = open_store(url)
        store.link.migrate()
        transport = f"{address}?{jetstream.names()}" if mode == "nats" else None
        argv = [sys.executable, "-m", "heartq", "worker", "tasks:app", "--url", url]
        argv += ["--concurrency", "4", "--poll-interval", "1", "--log-level", "warning"]
        if transport:
            argv += ["--transport", transport]
        worker = subprocess.Popen(argv, cwd=directory, stdout=subprocess.DEVNULL)
        app = heartq.App(url, transport=transport)
        try:
            deadline = time.monotonic() + 30
            while not store.list_workers():
                if time.monotonic() > deadline:
                    raise RuntimeError("the worker did not start")
                time.sleep(0.05)
            time.sleep(1.0)  # its stream, consumers and first poll settled
            ids = []
            for _ in range(jobs):
                ids.append(app.enqueue("noop"))
                time.sleep(random.uniform(0.02, 0.12))
            deadline = time.monotonic() + 60
            while any(c for q, s, c in store.count_jobs() if s != "succeeded"):
                if time.monotonic() > deadline:
                    raise RuntimeError("jobs did not all succeed")
                time.sleep(0.05)
            latencies = []
            for job_id in ids:
                job = store.get_job(job_id)
                created = _ts(job["created_at"])
                started = _ts(job["executions"][0]["started_at"])
                latencies.append((started - created) * 1000)
        finally:
            worker.terminate()
            worker.wait(30)
            app.close()
            store.link.close()
            if transport:
                jetstream.delete_stream(transport)
    latencies.sort()
    return {
        "p50": statistics.median(latencies),
        "p95": latencies[int(0.95 * (len(latencies) - 1))],
        "max": latencies[-1],
    }


def _ts(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--postgres", default=SERVER, metavar="URL", help="PostgreSQL server")
    args = parser.parse_args()
    results = []
    with jetstream.server_address() as address:
        for backend in args.backends.split(","):
            for mode in ("poll", "nats"):
                found = run(backend, mode, args.jobs, address, args.postgres)
                results.append({"backend": backend, "mode": mode, "jobs": args.jobs, **found})
                print(
                    f"{backend:9} {mode:5} p50 {found['p50']:7.1f} ms  "
                    f"p95 {found['p95']:7.1f} ms  max {found['max']:7.1f} ms",
                    flush=True,
                )
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
