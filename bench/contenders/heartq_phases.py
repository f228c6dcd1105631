"""heartq's phases for `python -m bench.cost` (`phases.py`), on PostgreSQL.

The jobs and the workers are `heartq_side.py`'s: the same no-op task (an `async def`
one with `--pool async`), `heartq worker --burst` processes with every guarantee on and
all settings but the pool, slots and prefetch at their defaults.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from heartq_side import TASKS
from phases import batches, phase_arguments


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
    elif args.phase == "work":
        here = str(Path(__file__).parent)
        path = [str(root), here, *filter(None, [os.environ.get("PYTHONPATH")])]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
        command = [
            sys.executable, "-m", "heartq", "worker", "bench_tasks:app", "--url", args.url,
            "--burst", "--concurrency", str(args.concurrency), "--prefetch", str(args.prefetch),
            "--pool", args.pool,
        ]  # fmt: skip
        procs = [subprocess.Popen(command, cwd=root, env=env) for _ in range(args.workers)]
        for proc in procs:
            if proc.wait(args.timeout) != 0:
                raise SystemExit(f"a worker exited with {proc.returncode}")
    app.close()


if __name__ == "__main__":
    main()
