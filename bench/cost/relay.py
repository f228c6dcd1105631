"""A TCP relay in front of the private server that counts what crosses it, each way.

Every connection a contender opens goes through it (its URLs name the relay's port),
so the bytes are the wire protocol's own, whatever the driver (psycopg, asyncpg) or
its pipelining. A **round trip** is counted each time a connection's client sends after
it last received (or first sends): a pipeline of statements written before any reply is
one, a statement per reply is one each. A notification the server sends unasked (LISTEN)
counts as bytes to the client; the client's next send starts a round trip, as it would.

It runs on an event loop of its own in a thread of the benchmark's process; its CPU is
the benchmark's, never the workers' or the server's (`bench.cpu_per_job`'s runs do not
go through it).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass

CHUNK = 1 << 16


@dataclass(frozen=True)
class Traffic:
    """Totals since the relay started: bytes each way, round trips, connections."""

    sent: int  # client -> server
    received: int  # server -> client
    round_trips: int
    connections: int

    def __sub__(self, other: Traffic) -> Traffic:
        return Traffic(
            self.sent - other.sent,
            self.received - other.received,
            self.round_trips - other.round_trips,
            self.connections - other.connections,
        )


class CountingRelay:
    """Listens on a free port of 127.0.0.1 and relays each connection to `port`."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.sent = self.received = self.round_trips = self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cost-relay", daemon=True)
        self._server: asyncio.AbstractServer | None = None
        self.port = 0
        self._thread.start()
        self._ready.wait(10)
        if not self.port:
            raise RuntimeError("the counting relay did not start")

    def traffic(self) -> Traffic:
        """The totals now (read from another thread: each is one int, written by the loop)."""
        return Traffic(self.sent, self.received, self.round_trips, self.connections)

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._relay, "127.0.0.1", 0)
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        self._ready.set()
        self._loop.run_forever()
        self._server.close()

    async def _relay(
        self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter
    ) -> None:
        try:
            server_in, server_out = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            client_out.close()
            return
        self.connections += 1
        replied = [True]  # the client's next send starts a round trip

        async def upstream() -> None:
            while data := await client_in.read(CHUNK):
                if replied[0]:
                    self.round_trips += 1
                    replied[0] = False
                self.sent += len(data)
                server_out.write(data)
                await server_out.drain()

        async def downstream() -> None:
            while data := await server_in.read(CHUNK):
                replied[0] = True
                self.received += len(data)
                client_out.write(data)
                await client_out.drain()

        tasks = [asyncio.ensure_future(upstream()), asyncio.ensure_future(downstream())]
        with contextlib.suppress(OSError):
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()
        for writer in (server_out, client_out):
            with contextlib.suppress(OSError, RuntimeError):
                writer.close()
