"""procrastinate on PostgreSQL, measured by the rules in `common.py`.

Workers: `--workers` processes, each `app.run_worker(concurrency=C, wait=False,
listen_notify=False)` (drain: it stops once a fetch finds no job, after its running jobs
end; every job is queued before it starts, so it has nothing to listen for) with an async
no-op task, psycopg 3 connector with its default pool (4 connections). C = 10 unless
`--concurrency` is given (10 and 50 tied here, 1 was about 20% slower). Batches:
`Task.batch_defer`. Last committed completion: the latest `at` of a `succeeded` row in
`procrastinate_events` (written by a trigger in the transaction that finishes the job).
Run by `python -m bench`; alone:
    .bench-venv/bin/python bench/contenders/procrastinate_side.py --dir /tmp/x --out r.json
"""

from __future__ import annotations

import logging
import subprocess
import sys
from importlib.metadata import version

import psycopg  # type: ignore[import-not-found]
from common import Result, Stamps, arguments, database_url, processes, rate, timed, wait_until
from procrastinate import App, PsycopgConnector  # type: ignore[import-not-found]

DATABASE = "heartq_bench_procrastinate"
CONCURRENCY = 10
COMPLETED = """
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
    # The app lives in __main__ on purpose (the task is found by its name): no warning.
    logging.getLogger("procrastinate.blueprints").setLevel(logging.ERROR)
    app = App(connector=PsycopgConnector(conninfo=url))

    @app.task(name="noop")
    async def noop() -> None:
        stamps.entered()

    return app, noop


def main() -> None:
    args = arguments(__doc__.splitlines()[0])
    url = database_url(args.server, DATABASE)
    stamps = Stamps(args.dir)
    concurrency = args.concurrency if "--concurrency" in sys.argv else CONCURRENCY
    if args.work:
        app, _ = make(url, stamps)
        app.run_worker(concurrency=concurrency, wait=False, listen_notify=False,
                       install_signal_handlers=False)  # fmt: skip
        return
    app, noop = make(url, stamps)
    recreate(args.server)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        rest = args.jobs - args.single
        with app.open():
            app.schema_manager.apply_schema()
            single = timed(lambda: [noop.defer() for _ in range(args.single)])  # type: ignore[attr-defined]
            batched = timed(
                lambda: [
                    noop.batch_defer(*[{}] * min(args.batch, rest - offset))  # type: ignore[attr-defined]
                    for offset in range(0, rest, args.batch)
                ]
            )
        command = [sys.executable, __file__, "--work", "--dir", args.dir,
                   "--server", args.server, "--concurrency", str(concurrency)]  # fmt: skip
        procs = [subprocess.Popen(command) for _ in range(args.workers)]
        elapsed = timed(
            lambda: wait_until(lambda: all(p.poll() is not None for p in procs), args.timeout)
        )
        if any(p.returncode for p in procs):
            raise RuntimeError(f"a worker failed: exit codes {[p.returncode for p in procs]}")
        with psycopg.connect(url) as conn:
            processed, last = conn.execute(COMPLETED).fetchone()
        Result(
            contender="procrastinate", version=version("procrastinate"),
            backend="postgresql", jobs=args.jobs, workers=args.workers, batch=args.batch,
            settings=f"{processes(args.workers)}, async task, concurrency {concurrency}, "
                     "default pool (4), wait=False, listen_notify=False",
            enqueue_single=rate(args.single, single), enqueue_batch=rate(rest, batched),
            process=rate(int(processed), float(last or 0.0) - stamps.first_entry()),
            processed=int(processed),
            notes=[f"workers ran {elapsed:.2f} s from start to exit"],
        ).write(args.out)  # fmt: skip
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        recreate(args.server, drop_only=True)


if __name__ == "__main__":
    main()
