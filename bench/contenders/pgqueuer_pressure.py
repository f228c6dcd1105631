"""pgqueuer's side of `bench.pressure`: its schema, its workers and its enqueue, run
with the peers' interpreter (`.bench-venv`), each at pgqueuer's defaults.

    pgqueuer_pressure.py install URL   # Queries.install()
    pgqueuer_pressure.py work URL      # QueueManager.run() with a no-op entrypoint, until SIGTERM
    pgqueuer_pressure.py enqueue URL   # reads `ENQUEUE <n>` lines on stdin (the harness's
                                       # pacer protocol) and enqueues n jobs in one call each

The pace is the bench's (`bench/pressure_load.py`: one place for it, as the harness keeps
its pacer out of the adapters); this only carries each batch to pgqueuer's own batch
enqueue. Every session is named `pressure-worker` or `pressure-producer`.
"""

from __future__ import annotations

import asyncio
import signal
import sys

import asyncpg  # type: ignore[import-not-found]
from pgqueuer import Queries, QueueManager  # type: ignore[import-not-found]
from pgqueuer.db import AsyncpgDriver  # type: ignore[import-not-found]


async def connect(url: str, name: str) -> asyncpg.Connection:
    return await asyncpg.connect(url, server_settings={"application_name": name})


async def install(url: str) -> None:
    conn = await connect(url, "pressure-bench")
    try:
        await Queries(AsyncpgDriver(conn)).install()
    finally:
        await conn.close()


async def work(url: str) -> None:
    conn = await connect(url, "pressure-worker")
    manager = QueueManager(Queries(AsyncpgDriver(conn)))

    @manager.entrypoint("noop")
    async def noop(job: object) -> None:
        return None

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, manager.shutdown.set)
    await manager.run()
    await conn.close()


async def enqueue(url: str) -> None:
    conn = await connect(url, "pressure-producer")
    queries = Queries(AsyncpgDriver(conn))
    loop = asyncio.get_running_loop()
    try:
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            count = int(line.split()[1])
            await queries.enqueue(["noop"] * count, [None] * count, [0] * count)
    finally:
        await conn.close()


def main() -> None:
    mode, url = sys.argv[1], sys.argv[2]
    modes = {"install": install, "work": work, "enqueue": enqueue}
    asyncio.run(modes[mode](url))


if __name__ == "__main__":
    main()
