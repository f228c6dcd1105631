"""No-op job throughput of heartq on SQLite, with every guarantee on.

Enqueues N no-op jobs in batches, then runs W worker processes (thread pool, given
concurrency) in burst mode until the queue is empty, and reports jobs/s for enqueue and
for processing. Run:  .venv/bin/python bench/throughput.py --jobs 20000 --workers 2

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
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="heartq-bench-") as tmp:
        root = Path(tmp)
        (root / "bench_tasks.py").write_text(TASKS)
        url = f"sqlite:///{root / 'q.db'}"
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

    print("backend            sqlite (WAL, synchronous=FULL)")
    print(f"jobs               {args.jobs}")
    rate = args.jobs / enqueue_s
    print(f"enqueue            {rate:,.0f} jobs/s (enqueue_many, batch {args.batch})")
    print(
        f"process            {counts.get('succeeded', 0) / run_s:,.0f} jobs/s "
        f"({args.workers} worker processes x concurrency {args.concurrency}, incl. startup)"
    )
    print(f"final counts       {counts}")


if __name__ == "__main__":
    main()
