"""pgqueuer on PostgreSQL, measured by the rules in `common.py`.

Workers: `QueueManager.run(batch_size=B, mode=drain)` with B = `--batch` (100: its best
setting measured here), one asyncpg connection each. Last committed completion: the latest
`created` of a `successful` row in `pgqueuer_log` (written by its completion batch).
Run by `python -m bench`; alone:
    .bench-venv/bin/python bench/contenders/pgqueuer_side.py --dir /tmp/x --out r.json
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from importlib.metadata import version

import asyncpg  # type: ignore[import-not-found]
from common import Result, Stamps, arguments, database_url, processes, rate, timed
from pgqueuer import Queries, QueueManager  # type: ignore[import-not-found]
from pgqueuer.db import AsyncpgDriver  # type: ignore[import-not-found]

DATABASE = "heartq_bench_pgqueuer"


async def recreate(server: str, drop_only: bool = False) -> None:
    admin = await asyncpg.connect(server)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        if not drop_only:
            await admin.execute(f'CREATE DATABASE "{DATABASE}"')
    finally:
        await admin.close()


async def fill(url: str, jobs: int, single: int, batch: int) -> tuple[float, float]:
    conn = await asyncpg.connect(url)
    try:
        queries = Queries(AsyncpgDriver(conn))
        await queries.install()

        async def one_by_one() -> float:
            started = asyncio.get_running_loop().time()
            for _ in range(single):
                await queries.enqueue("noop", None, 0)
            return asyncio.get_running_loop().time() - started

        async def batches() -> float:
            started = asyncio.get_running_loop().time()
            for offset in range(0, jobs - single, batch):
                k = min(batch, jobs - single - offset)
                await queries.enqueue(["noop"] * k, [None] * k, [0] * k)
            return asyncio.get_running_loop().time() - started

        return rate(single, await one_by_one()), rate(jobs - single, await batches())
    finally:
        await conn.close()


async def work(url: str, batch: int, stamps: Stamps, **settings: object) -> None:
    """One worker process until the queue is empty; `settings`: more of `run`'s
    arguments (`bench.cost` sets two), its defaults otherwise."""
    from pgqueuer import types  # type: ignore[import-not-found]

    conn = await asyncpg.connect(url)
    manager = QueueManager(Queries(AsyncpgDriver(conn)))

    @manager.entrypoint("noop")
    async def noop(job: object) -> None:
        stamps.entered()

    await manager.run(batch_size=batch, mode=types.QueueExecutionMode.drain, **settings)
    await conn.close()


async def completed(url: str) -> tuple[int, float]:
    conn = await asyncpg.connect(url)
    try:
        row = await conn.fetchrow(
            "SELECT count(*), extract(epoch FROM max(created))::float8"
            " FROM pgqueuer_log WHERE status = 'successful'"
        )
        return int(row[0]), float(row[1] or 0.0)
    finally:
        await conn.close()


def main() -> None:
    args = arguments(__doc__.splitlines()[0])
    url = database_url(args.server, DATABASE)
    stamps = Stamps(args.dir)
    if args.work:
        asyncio.run(work(url, args.batch, stamps))
        return
    asyncio.run(recreate(args.server))
    try:
        single, batched = asyncio.run(fill(url, args.jobs, args.single, args.batch))
        command = [sys.executable, __file__, "--work", "--dir", args.dir,
                   "--server", args.server, "--batch", str(args.batch)]  # fmt: skip
        procs = [subprocess.Popen(command) for _ in range(args.workers)]
        elapsed = timed(lambda: [proc.wait(args.timeout) for proc in procs])
        processed, last = asyncio.run(completed(url))
        Result(
            contender="pgqueuer", version=version("pgqueuer"), backend="postgresql",
            jobs=args.jobs, workers=args.workers, batch=args.batch,
            settings=f"{processes(args.workers)}, asyncpg, batch_size {args.batch}, drain",
            enqueue_single=single, enqueue_batch=batched,
            process=rate(processed, last - stamps.first_entry()), processed=processed,
            notes=[f"workers ran {elapsed:.2f} s from start to exit"],
        ).write(args.out)  # fmt: skip
    finally:
        asyncio.run(recreate(args.server, drop_only=True))


if __name__ == "__main__":
    main()
