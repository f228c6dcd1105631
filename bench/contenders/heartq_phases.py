"""heartq's phases for `python -m bench.cost` (`phases.py`), on PostgreSQL.

The jobs and the workers are `heartq_side.py`'s: the same no-op task (an `async def`
one with `--pool async`), `heartq worker --burst` processes with every guarantee on and
all settings but the pool, slots and prefetch at their defaults (`flow`: the same
processes without `--burst`, stopped by SIGTERM once every job has finished).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from argparse import Namespace
from pathlib import Path
from typing import Any, LiteralString

import psycopg
from heartq_side import TASKS
from phases import batches, paced, phase_arguments, wait_until


def flow(app: Any, task: str, args: Namespace, procs: list[subprocess.Popen[bytes]]) -> None:
    """Once the workers are up, `--jobs` jobs at `--rate` a second; once every one has
    finished, the workers stopped."""
    with psycopg.connect(args.url, autocommit=True) as conn:

        def count(query: LiteralString) -> int:
            row = conn.execute(query).fetchone()
            return int(row[0]) if row else 0

        up = "SELECT count(*) FROM heartq.workers WHERE status = 'active'"
        wait_until(lambda: count(up) >= len(procs), args.timeout, "the workers up")
        for size in paced(args.jobs, args.rate):
            app.enqueue_many(task, [{}] * size)
        done = "SELECT count(*) FROM heartq.jobs WHERE finished_at IS NOT NULL"
        wait_until(lambda: count(done) >= args.jobs, args.timeout, "every job finished")
    for proc in procs:
        proc.send_signal(signal.SIGTERM)


def main() -> None:
    args = phase_arguments(__doc__.splitlines()[0])
    root = Path(args.dir)
    root.mkdir(parents=True, exist_ok=True)
    (root / "bench_tasks.py").write_text(TASKS)
    os.environ["HEARTQ_BENCH_DIR"] = str(root)
    sys.path.insert(0, str(root))
    import bench_tasks  # type: ignore[import-not-found]

    app = bench_tasks.app
    app.use_url(args.url)
    task = "async_noop" if args.pool == "async" else "noop"
    if args.phase == "setup":
        app.migrate()
    elif args.phase == "enqueue":
        for size in batches(args.jobs, args.batch):
            if args.batch == 1:
                app.enqueue(task)
            else:
                app.enqueue_many(task, [{}] * size)
    elif args.phase in ("work", "flow"):
        here = str(Path(__file__).parent)
        path = [str(root), here, *filter(None, [os.environ.get("PYTHONPATH")])]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
        command = [
            sys.executable, "-m", "heartq", "worker", "bench_tasks:app", "--url", args.url,
            "--concurrency", str(args.concurrency), "--prefetch", str(args.prefetch),
            "--pool", args.pool, *(["--burst"] if args.phase == "work" else []),
        ]  # fmt: skip
        procs = [subprocess.Popen(command, cwd=root, env=env) for _ in range(args.workers)]
        if args.phase == "flow":
            flow(app, task, args, procs)
        for proc in procs:
            if proc.wait(args.timeout) != 0:
                raise SystemExit(f"a worker exited with {proc.returncode}")
    app.close()


if __name__ == "__main__":
    main()
