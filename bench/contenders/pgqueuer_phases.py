"""pgqueuer's phases for `python -m bench.cost` (`phases.py`).

The jobs and the workers are `pgqueuer_side.py`'s: the same enqueue calls, and worker
processes each running `QueueManager.run(batch_size=--claim, mode=drain)` on one asyncpg
connection (`work-one` is one of them), with two settings of its own:

- `log_aggregation_interval=0` (its log folded into statistics when they are read, as
  pgqueuer documents it): on its 30 s default timer the fold of a job's two log rows
  happens in a round that lasts 30 s and not in a shorter one, so a difference of two
  rounds would count it for some jobs and not others; it is left out, and said so.
- `heartbeat_timeout=--heartbeat-timeout` seconds (30 by default, its own): under
  callgrind `bench.cost` gives 300, or a batch whose heartbeat the slowed server has not
  written within 30 s is picked and run a second time.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from datetime import timedelta

import asyncpg  # type: ignore[import-not-found]
from common import Stamps
from pgqueuer import Queries  # type: ignore[import-not-found]
from pgqueuer.db import AsyncpgDriver  # type: ignore[import-not-found]
from pgqueuer_side import work
from phases import batches, phase_arguments


async def setup(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await Queries(AsyncpgDriver(conn)).install()
    finally:
        await conn.close()


async def enqueue(url: str, jobs: int, batch: int) -> None:
    conn = await asyncpg.connect(url)
    try:
        queries = Queries(AsyncpgDriver(conn))
        for size in batches(jobs, batch):
            if batch == 1:
                await queries.enqueue("noop", None, 0)
            else:
                await queries.enqueue(["noop"] * size, [None] * size, [0] * size)
    finally:
        await conn.close()


def main() -> None:
    args = phase_arguments(__doc__.splitlines()[0])
    if args.phase == "setup":
        asyncio.run(setup(args.url))
    elif args.phase == "enqueue":
        asyncio.run(enqueue(args.url, args.jobs, args.batch))
    elif args.phase == "work-one":
        settings = {
            "log_aggregation_interval": timedelta(0),
            "heartbeat_timeout": timedelta(seconds=args.heartbeat_timeout),
        }
        asyncio.run(work(args.url, args.claim, Stamps(args.dir), **settings))
    elif args.phase == "work":
        command = [sys.executable, __file__, "work-one", "--url", args.url, "--dir", args.dir,
                   "--claim", str(args.claim),
                   "--heartbeat-timeout", str(args.heartbeat_timeout)]  # fmt: skip
        procs = [subprocess.Popen(command) for _ in range(args.workers)]
        for proc in procs:
            if proc.wait(args.timeout) != 0:
                raise SystemExit(f"a worker exited with {proc.returncode}")


if __name__ == "__main__":
    main()
