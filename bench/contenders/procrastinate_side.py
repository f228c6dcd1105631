"""procrastinate on PostgreSQL, measured by the rules in `common.py`.

Workers: `--workers` processes, each `app.run_worker(concurrency=C, wait=False)` (drain:
it exits when no job is left) with an async no-op task, psycopg 3 connector with its
default pool; C = `--concurrency` capped at 10. Batches: `batch_defer`. Last committed
completion: the latest `at` of a `succeeded` event in `procrastinate_events`.
Run by `python -m bench`; alone:
    .bench-venv/bin/python bench/contenders/procrastinate_side.py --dir /tmp/x --out r.json
"""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

import psycopg  # type: ignore[import-not-found]
from common import Result, Stamps, arguments, database_url, processes, rate, timed
from procrastinate import App, PsycopgConnector  # type: ignore[import-not-found]

DATABASE = "heartq_bench_procrastinate"
CONCURRENCY = 10
LAST = """
SELECT (SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'),
       extract(epoch FROM max(at))::float8
FROM procrastinate_events WHERE type = 'succeeded'
"""


def recreate(server: str, drop_only: bool = False) -> None:
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        if not drop_only:
            admin.execute(f'CREATE DATABASE "{DATABASE}"')


def make(url: str, stamps: Stamps) -> tuple[App, object]:
    app = App(connector=PsycopgConnector(conninfo=url))

    @app.task(name="noop")
    async def noop() -> None:
        stamps.entered()

    return app, noop


def main() -> None:
    args = arguments(__doc__.splitlines()[0])
    url = database_url(args.server, DATABASE)
    stamps = Stamps(args.dir)
    app, noop = make(url, stamps)
    concurrency = min(args.concurrency, CONCURRENCY)
    if args.work:
        app.run_worker(concurrency=concurrency, wait=False, install_signal_handlers=False)
        return
    recreate(args.server)
    try:
        with app.open():
            app.schema_manager.apply_schema()
            single = timed(lambda: [noop.defer() for _ in range(args.single)])  # type: ignore[attr-defined]

            def batches() -> None:
                for offset in range(0, args.jobs - args.single, args.batch):
                    k = min(args.batch, args.jobs - args.single - offset)
                    noop.batch_defer(*[{}] * k)  # type: ignore[attr-defined]

            batched = timed(batches)
        command = [sys.executable, __file__, "--work", "--dir", args.dir,
                   "--server", args.server, "--concurrency", str(concurrency)]  # fmt: skip
        procs = [subprocess.Popen(command) for _ in range(args.workers)]
        for proc in procs:
            proc.wait(args.timeout)
        with psycopg.connect(url) as conn:
            processed, last = conn.execute(LAST).fetchone()
        Result(
            contender="procrastinate", version=version("procrastinate"),
            backend="postgresql", jobs=args.jobs, workers=args.workers, batch=args.batch,
            settings=f"{processes(args.workers)}, async task, concurrency {concurrency}, "
                     "wait=False",
            enqueue_single=rate(args.single, single),
            enqueue_batch=rate(args.jobs - args.single, batched),
            process=rate(int(processed), float(last or 0) - stamps.first_entry()),
            processed=int(processed),
        ).write(args.out)  # fmt: skip
    finally:
        recreate(args.server, drop_only=True)


if __name__ == "__main__":
    main()
