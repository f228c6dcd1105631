"""heartq on SQLite or PostgreSQL, measured by the rules in `common.py`.

Workers: `heartq worker --burst` processes with every guarantee on (leases renewed by
heartbeat, an execution row per attempt, fenced completion), thread pool at
`--concurrency` (`--pool async`: an `async def` no-op on the async pool), all other
settings at their defaults (`--claim-commit async`: the workers' URL says
`claim_commit=async`). Last committed completion: the
latest `finished_at` of a succeeded job. `--backend sqlite` uses a file in `--dir`
(WAL, synchronous=FULL); `--backend postgresql` a database of its own on `--server`.
Run by `python -m bench`; alone:
    .venv/bin/python bench/contenders/heartq_side.py --backend sqlite --dir /tmp/x --out r.json
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from common import Result, arguments, database_url, fair_key_args, processes, rate, timed

import heartq

DATABASE = "heartq_bench_heartq"
TASKS = textwrap.dedent(
    """
    import os
    import heartq
    from common import FAIR_KEY, Stamps

    app = heartq.App()
    stamps = Stamps(os.environ["HEARTQ_BENCH_DIR"])

    @app.task
    def noop() -> None:
        stamps.entered()

    @app.task
    async def async_noop() -> None:
        stamps.entered()

    @app.task(fair_key=FAIR_KEY)
    def fair_noop(key: int) -> None:
        stamps.entered()

    @app.task
    def keyed_noop(key: int) -> None:  # fair_noop's arguments, no fairness key
        stamps.entered()
    """
)
LAST_COMPLETION = {
    "sqlite": "SELECT count(*), max(finished_at) FROM heartq_jobs WHERE status = 'succeeded'",
    "postgresql": "SELECT count(*), extract(epoch FROM max(finished_at))::float8"
    " FROM heartq.jobs WHERE status = 'succeeded'",
}


def recreate(server: str, drop_only: bool = False) -> None:
    import psycopg

    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        if not drop_only:
            admin.execute(f'CREATE DATABASE "{DATABASE}"')


def completed(backend: str, url: str) -> tuple[int, float]:
    if backend == "sqlite":
        import sqlite3

        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            count, last = conn.execute(LAST_COMPLETION[backend]).fetchone()
    else:
        import psycopg

        with psycopg.connect(url) as pg:
            count, last = pg.execute(LAST_COMPLETION[backend]).fetchone()  # type: ignore[misc]
    return int(count), float(last or 0.0)


def main() -> None:
    args = arguments(__doc__.splitlines()[0])
    root = Path(args.dir)
    (root / "bench_tasks.py").write_text(TASKS)
    sys.path.insert(0, str(root))
    postgres = args.backend == "postgresql"
    url = database_url(args.server, DATABASE) if postgres else f"sqlite:///{root / 'q.db'}"
    lazy = postgres and args.claim_commit == "async"
    worker_url = url + ("&" if "?" in url else "?") + "claim_commit=async" if lazy else url
    if postgres:
        recreate(args.server)
    try:
        os.environ["HEARTQ_BENCH_DIR"] = str(root)
        import bench_tasks  # type: ignore[import-not-found]

        app: heartq.App = bench_tasks.app
        app.use_url(url)
        app.migrate()
        task = "async_noop" if args.pool == "async" else "noop"
        if args.fair_keys:
            task = "fair_noop"
        elif args.key_args:
            task = "keyed_noop"

        def job_args(n: int) -> dict[str, int]:
            return fair_key_args(n, args.fair_keys or args.key_args)

        single = timed(lambda: [app.enqueue(task, job_args(n)) for n in range(args.single)])
        rest = args.jobs - args.single
        batched = timed(
            lambda: [
                app.enqueue_many(
                    task, [job_args(n) for n in range(offset, min(rest, offset + args.batch))]
                )
                for offset in range(0, rest, args.batch)
            ]
        )
        here = str(Path(__file__).parent)
        path = [str(root), here, *filter(None, [os.environ.get("PYTHONPATH")])]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
        command = [
            sys.executable, "-m", "heartq", "worker", "bench_tasks:app", "--url", worker_url,
            "--burst", "--concurrency", str(args.concurrency), "--prefetch", str(args.prefetch),
            "--pool", args.pool,
        ]  # fmt: skip
        procs = [
            subprocess.Popen(command, cwd=root, env=env, stderr=subprocess.DEVNULL)
            for _ in range(args.workers)
        ]
        elapsed = timed(lambda: [proc.wait(args.timeout) for proc in procs])
        app.close()
        processed, last = completed(args.backend, url)
        Result(
            contender="heartq", version=heartq.__version__, backend=args.backend,
            jobs=args.jobs, workers=args.workers, batch=args.batch,
            settings=f"{processes(args.workers)}, {args.pool} pool x {args.concurrency}, burst"
            + (", async def task" if args.pool == "async" else "")
            + (f", prefetch {args.prefetch}" if args.prefetch else "")
            + (f", {args.fair_keys} fairness keys" if args.fair_keys else "")
            + (f", {args.key_args} keys' arguments, no fairness" if args.key_args else "")
            + (", claims not waiting for their flush" if lazy else ""),
            enqueue_single=rate(args.single, single), enqueue_batch=rate(rest, batched),
            process=rate(processed, last - bench_tasks.stamps.first_entry()),
            processed=processed,
            notes=[f"workers ran {elapsed:.2f} s from start to exit"],
        ).write(args.out)  # fmt: skip
    finally:
        if postgres:
            recreate(args.server, drop_only=True)


if __name__ == "__main__":
    main()
