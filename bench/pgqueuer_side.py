"""pgqueuer, measured the way `bench/throughput.py` measures heartq, for a same-run ratio.

N no-op jobs enqueued in batches of 100, then W pgqueuer worker processes in drain mode
(`QueueManager.run(batch_size=B, mode=drain)`, B = 100: pgqueuer's best setting measured
here); jobs/s from starting the workers to the last one exiting, startup included. It
runs in an environment of its own, with a database of its own (created, then dropped):

    python3 -m venv /tmp/peers && /tmp/peers/bin/pip install pgqueuer asyncpg
    /tmp/peers/bin/python bench/pgqueuer_side.py --jobs 20000 --workers 2
    .venv/bin/python bench/throughput.py --jobs 20000 --batch 100 \\
        --postgres postgresql://postgres@127.0.0.1:5432/test

Interleave the two, round by round. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time

import asyncpg  # type: ignore[import-not-found]
from pgqueuer import Queries, QueueManager  # type: ignore[import-not-found]
from pgqueuer.db import AsyncpgDriver  # type: ignore[import-not-found]

SERVER = "postgresql://postgres@127.0.0.1:5432"
DATABASE = "heartq_bench_pgqueuer"


async def recreate(drop_only: bool = False) -> None:
    admin = await asyncpg.connect(f"{SERVER}/test")
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{DATABASE}"')
        if not drop_only:
            await admin.execute(f'CREATE DATABASE "{DATABASE}"')
    finally:
        await admin.close()


async def fill(jobs: int) -> float:
    conn = await asyncpg.connect(f"{SERVER}/{DATABASE}")
    try:
        queries = Queries(AsyncpgDriver(conn))
        await queries.install()
        started = time.perf_counter()
        for offset in range(0, jobs, 100):
            k = min(100, jobs - offset)
            await queries.enqueue(["noop"] * k, [None] * k, [0] * k)
        return jobs / (time.perf_counter() - started)
    finally:
        await conn.close()


async def work(batch: int) -> None:
    from pgqueuer import types  # type: ignore[import-not-found]

    conn = await asyncpg.connect(f"{SERVER}/{DATABASE}")
    manager = QueueManager(Queries(AsyncpgDriver(conn)))

    @manager.entrypoint("noop")
    async def noop(job: object) -> None:
        return None

    await manager.run(batch_size=batch, mode=types.QueueExecutionMode.drain)
    await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--work", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.work:
        asyncio.run(work(args.batch))
        return
    asyncio.run(recreate())
    try:
        rate = asyncio.run(fill(args.jobs))
        print(f"enqueue            {rate:,.0f} jobs/s (batch 100)")
        command = [sys.executable, __file__, "--work", "--batch", str(args.batch)]
        started = time.perf_counter()
        procs = [subprocess.Popen(command) for _ in range(args.workers)]
        for proc in procs:
            proc.wait()
        rate = args.jobs / (time.perf_counter() - started)
        workers = f"{args.workers} processes, batch {args.batch}"
        print(f"process            {rate:,.0f} jobs/s ({workers})")
    finally:
        asyncio.run(recreate(drop_only=True))


if __name__ == "__main__":
    main()
