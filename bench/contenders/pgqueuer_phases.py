"""pgqueuer's phases for `python -m bench.cost` (`phases.py`).

The jobs and the workers are `pgqueuer_side.py`'s: the same enqueue calls, and worker
processes each running `QueueManager.run(batch_size=--claim, mode=drain)` on one asyncpg
connection (`work-one` is one of them; `flow`'s, `flow-one`, run it in its continuous
mode until SIGTERM), with two settings of its own:

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
import signal
import subprocess
import sys
import time
from argparse import Namespace
from collections.abc import Awaitable, Callable
from datetime import timedelta

import asyncpg  # type: ignore[import-not-found]
from common import Stamps
from pgqueuer import Queries, QueueManager  # type: ignore[import-not-found]
from pgqueuer.db import AsyncpgDriver  # type: ignore[import-not-found]
from pgqueuer_side import work
from phases import batches, paced, phase_arguments

FLOW_WORKER = "cost-flow-worker"
"""The `application_name` of `flow`'s workers, to count them up."""


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


async def work_until_stopped(url: str, claim: int, settings: dict[str, object]) -> None:
    """One worker of `flow`: `QueueManager.run` in its continuous mode (its default) with
    `work-one`'s settings, until SIGTERM."""
    conn = await asyncpg.connect(url, server_settings={"application_name": FLOW_WORKER})
    manager = QueueManager(Queries(AsyncpgDriver(conn)))

    @manager.entrypoint("noop")
    async def noop(job: object) -> None:
        return None

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, manager.shutdown.set)
    await manager.run(batch_size=claim, **settings)
    await conn.close()


async def flow(args: Namespace, procs: list[subprocess.Popen[bytes]]) -> None:
    """Once the workers are up, `--jobs` jobs at `--rate` a second; once every one has
    succeeded, the workers stopped."""
    conn = await asyncpg.connect(args.url)
    try:
        up = ("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1"
              " AND datname = current_database()")  # fmt: skip
        await until(lambda: conn.fetchval(up, FLOW_WORKER), len(procs), args.timeout)
        queries = Queries(AsyncpgDriver(conn))
        for size in paced(args.jobs, args.rate):
            await queries.enqueue(["noop"] * size, [None] * size, [0] * size)
        done = "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'"
        await until(lambda: conn.fetchval(done), args.jobs, args.timeout)
    finally:
        await conn.close()
    for proc in procs:
        proc.send_signal(signal.SIGTERM)


async def until(count: Callable[[], Awaitable[int]], wanted: int, timeout: float) -> None:
    """Poll `count()` every 0.1 s until it reaches `wanted`, or fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    while await count() < wanted:
        if time.monotonic() > deadline:
            raise SystemExit(f"{wanted} not reached within {timeout:.0f} s")
        await asyncio.sleep(0.1)


def main() -> None:
    args = phase_arguments(__doc__.splitlines()[0])
    if args.phase == "setup":
        asyncio.run(setup(args.url))
    elif args.phase == "enqueue":
        asyncio.run(enqueue(args.url, args.jobs, args.batch))
    elif args.phase in ("work-one", "flow-one"):
        settings = {
            "log_aggregation_interval": timedelta(0),
            "heartbeat_timeout": timedelta(seconds=args.heartbeat_timeout),
        }
        if args.phase == "flow-one":
            asyncio.run(work_until_stopped(args.url, args.claim, settings))
        else:
            asyncio.run(work(args.url, args.claim, Stamps(args.dir), **settings))
    elif args.phase in ("work", "flow"):
        one = "work-one" if args.phase == "work" else "flow-one"
        command = [sys.executable, __file__, one, "--url", args.url, "--dir", args.dir,
                   "--claim", str(args.claim),
                   "--heartbeat-timeout", str(args.heartbeat_timeout)]  # fmt: skip
        procs = [subprocess.Popen(command) for _ in range(args.workers)]
        if args.phase == "flow":
            asyncio.run(flow(args, procs))
        for proc in procs:
            if proc.wait(args.timeout) != 0:
                raise SystemExit(f"a worker exited with {proc.returncode}")


if __name__ == "__main__":
    main()
