"""No-op job throughput of heartq, with every guarantee on, on SQLite or PostgreSQL.

Enqueues N no-op jobs in batches, then runs W worker processes (thread pool, given
concurrency) in burst mode until the queue is empty, and reports jobs/s for enqueue and
for processing. Run:  .venv/bin/python bench/throughput.py --jobs 20000 --workers 2
On PostgreSQL: add `--postgres postgresql://postgres@127.0.0.1:5432/test`; the run uses
a schema of its own and drops it afterwards.

Figures are printed, never asserted: compare them with peers measured in the same run
on the same machine (see docs/BENCHMARKS.md once it exists).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

TASKS = textwrap.dedent(
    """
    import heartq
    app = heartq.App()

    @app.task
    def noop() -> None:
        return None
    """
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--batch", type=int, default=1000, help="jobs per enqueue_many")
    parser.add_argument(
        "--postgres", metavar="URL", help="run on PostgreSQL at URL (a schema of its own)"
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="heartq-bench-") as tmp:
        root = Path(tmp)
        (root / "bench_tasks.py").write_text(TASKS)
        schema = f"bench_{uuid.uuid4().hex[:12]}"
        sep = "&" if "?" in (args.postgres or "") else "?"
        url = (
            f"{args.postgres}{sep}schema={schema}"
            if args.postgres
            else f"sqlite:///{root / 'q.db'}"
        )
        sys.path.insert(0, str(root))
        import bench_tasks  # type: ignore[import-not-found]

        app = bench_tasks.app
        app.use_url(url)
        app.migrate()
        started = time.perf_counter()
        for offset in range(0, args.jobs, args.batch):
            count = min(args.batch, args.jobs - offset)
            app.enqueue_many("noop", [{}] * count)
        enqueue_s = time.perf_counter() - started

        env = dict(os.environ, PYTHONPATH=str(root))
        command = [
            sys.executable, "-m", "heartq", "worker", "bench_tasks:app", "--url", url,
            "--burst", "--concurrency", str(args.concurrency), "--poll-interval", "0.05",
        ]  # fmt: skip
        started = time.perf_counter()
        procs = [
            subprocess.Popen(command, cwd=root, env=env, stderr=subprocess.DEVNULL)
            for _ in range(args.workers)
        ]
        for proc in procs:
            proc.wait()
        run_s = time.perf_counter() - started
        counts = {status: n for _, status, n in app.store.count_jobs()}
        if args.postgres:
            _drop_schema(args.postgres, schema)

    backend = "postgresql" if args.postgres else "sqlite (WAL, synchronous=FULL)"
    print(f"backend            {backend}")
    print(f"jobs               {args.jobs}")
    rate = args.jobs / enqueue_s
    print(f"enqueue            {rate:,.0f} jobs/s (enqueue_many, batch {args.batch})")
    print(
        f"process            {counts.get('succeeded', 0) / run_s:,.0f} jobs/s "
        f"({args.workers} worker processes x concurrency {args.concurrency}, incl. startup)"
    )
    print(f"final counts       {counts}")


def _drop_schema(url: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


if __name__ == "__main__":
    main()
