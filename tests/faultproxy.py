"""A TCP proxy that injects network faults at runtime: partitions and slow links.

A worker reaches its database through a `FaultProxy` when its URL names the proxy's
address instead of the server's (`proxy.url_for(url)`); the test (or the chaos runner)
then steers that proxy from its own process, at any moment:

    with FaultProxy(("127.0.0.1", 5432)) as proxy:
        worker = start_worker(url=proxy.url_for(queue_url))
        proxy.cut()                       # a blackhole: nothing flows, nothing closes
        ...
        proxy.heal()                      # what was held flows again, in order
        proxy.delay(up_ms=200, down_ms=200)   # a slow link, each direction
        proxy.reset_connections()         # RST to both ends (a NAT or firewall drop)
        proxy.close_connections()         # FIN to both ends
        proxy.refuse()                    # RST now and to each new connection
        proxy.heal()                      # ... until the heal

One proxy is one link: every fault applies to every connection through it, current and
future, so a fleet in which one worker is partitioned gives that worker a proxy of its
own. The proxy runs an asyncio loop on a daemon thread of the calling process; each
control method returns once the loop applied it (after `cut()` returns, no byte read
from then on is forwarded).

What each fault is, on the wire:

- `cut()`: a partition in which packets are lost and TCP keeps retrying. Sockets stay
  open on both sides; the proxy stops forwarding in both directions and holds what it
  read (a client's query, a server's answer). A connection opened during the cut is
  accepted but not carried to the server until the heal (its handshake never
  completes: libpq's `connect_timeout` fires, as it would). `heal()` delivers what was
  held, in order, as TCP's retransmissions would once the path is back.
- `delay(up_ms, down_ms)`: each chunk read at time t is delivered at t + delay of its
  direction (`up`: client to server, `down`: server to client), in order; a round trip
  costs `up_ms + down_ms`. A new delay applies to the chunks read from then on.
- `reset_connections()`: every current connection is aborted with `SO_LINGER` 0, so
  both ends get a reset (ECONNRESET), as from a middlebox that dropped its state.
- `close_connections()`: every current connection is closed cleanly (FIN to both ends).
- `refuse()`: a partition both ends learn of at once: every current connection is reset,
  and each one opened until `heal()` is reset as soon as it is accepted (never carried
  to the server), as when a firewall between two hosts rejects their packets. Clients
  that reconnect in a loop (a NATS server's routes) see the link down until the heal.

What a user-space proxy cannot fake: TCP's own timers. The client's kernel talks to the
proxy's kernel, which acknowledges every segment and answers every keepalive probe, and
so does the server's. Through a cut proxy neither end's `tcp_user_timeout` nor TCP
keepalive ever fires: the cut is a partition that both kernels sit out, as they do one
shorter than their timeouts. A partition the kernels notice needs packets dropped by the
kernel itself (see docs/RELIABILITY.md, "Partitions and slow links").
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

T = TypeVar("T")

CHUNK = 65536
"""Bytes read at once from either end."""
HELD_LIMIT = 4 << 20
"""Bytes a direction may hold (delayed or cut) before the proxy stops reading that end, so
that a sender that outpaces a slow or cut link meets TCP's back-pressure, not a proxy
that buffers without bound."""
CONTROL_TIMEOUT = 10.0
"""Seconds a control method waits for the proxy's loop to apply it."""


@dataclass
class Stats:
    """What went through the proxy (bytes forwarded, connections accepted)."""

    accepted: int = 0
    up_bytes: int = 0
    down_bytes: int = 0


@dataclass
class _Direction:
    """One direction of one connection: what was read and not yet written."""

    name: str  # "up" or "down"
    held: deque[tuple[float, bytes | None]] = field(default_factory=deque)  # None: EOF
    held_bytes: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)


class _Link:
    """One client connection and its connection to the server."""

    def __init__(
        self, proxy: FaultProxy, client: tuple[asyncio.StreamReader, asyncio.StreamWriter]
    ):
        self.proxy = proxy
        self.client_reader, self.client_writer = client
        self.server_writer: asyncio.StreamWriter | None = None
        self.tasks: list[asyncio.Task[None]] = []

    async def run(self) -> None:
        proxy = self.proxy
        await proxy._flowing.wait()  # opened during a cut: not carried until the heal
        if proxy._closing:
            self.abort()
            return
        try:
            server_reader, self.server_writer = await asyncio.open_connection(*proxy.upstream)
        except OSError:
            self.abort()
            return
        up, down = _Direction("up"), _Direction("down")
        self.tasks = [
            asyncio.ensure_future(self._read(self.client_reader, up)),
            asyncio.ensure_future(self._write(up, self.server_writer)),
            asyncio.ensure_future(self._read(server_reader, down)),
            asyncio.ensure_future(self._write(down, self.client_writer)),
        ]
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.close()

    async def _read(self, reader: asyncio.StreamReader, direction: _Direction) -> None:
        proxy = self.proxy
        while True:
            await proxy._flowing.wait()
            while direction.held_bytes > HELD_LIMIT:
                direction.changed.clear()
                await direction.changed.wait()
            try:
                data = await reader.read(CHUNK)
            except OSError:
                data = b""
            delay = proxy._delay_s[direction.name]
            last = direction.held[-1][0] if direction.held else 0.0
            due = max(time.monotonic() + delay, last)
            direction.held.append((due, data or None))
            direction.held_bytes += len(data)
            direction.changed.set()
            if not data:
                return

    async def _write(self, direction: _Direction, writer: asyncio.StreamWriter) -> None:
        proxy = self.proxy
        while True:
            while not direction.held:
                direction.changed.clear()
                await direction.changed.wait()
            due, data = direction.held[0]
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            await proxy._flowing.wait()  # a cut holds what was read
            direction.held.popleft()
            direction.changed.set()
            if data is None:
                with contextlib.suppress(OSError):
                    if writer.can_write_eof():
                        writer.write_eof()
                return
            direction.held_bytes -= len(data)
            if direction.name == "up":  # counted before the other end can see them
                proxy.stats.up_bytes += len(data)
            else:
                proxy.stats.down_bytes += len(data)
            try:
                writer.write(data)
                await writer.drain()
            except OSError:
                self.abort()
                return

    def writers(self) -> list[asyncio.StreamWriter]:
        return [w for w in (self.client_writer, self.server_writer) if w is not None]

    def abort(self) -> None:
        """Reset both ends: SO_LINGER 0, then close, so the kernel sends RST."""
        for writer in self.writers():
            sock = writer.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        self._stop()

    def close(self) -> None:
        """Close both ends cleanly (FIN)."""
        for writer in self.writers():
            writer.close()
        self._stop()

    def _stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        self.proxy._links.discard(self)


class FaultProxy:
    """A TCP proxy to `upstream` (host, port) on `host:port` (port 0: a free one), whose
    faults the calling process switches at runtime (module docstring)."""

    def __init__(
        self, upstream: tuple[str, int], *, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.upstream = upstream
        self.host = host
        self.port = port
        self.stats = Stats()
        self.cut_at: float | None = None
        """`time.time()` of the cut in force, None while the link is whole."""
        self.refused_at: float | None = None
        """`time.time()` of the refusal in force (`refuse()`), None while none is."""
        self._delay_s = {"up": 0.0, "down": 0.0}
        self._links: set[_Link] = set()
        self._closing = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.base_events.Server | None = None
        self._flowing: asyncio.Event

    @classmethod
    def in_front_of(cls, url: str, default_port: int = 5432) -> FaultProxy:
        """A proxy (not started) to the server `url` names (its port, else
        `default_port`: PostgreSQL's)."""
        parts = urlsplit(url)
        if not parts.hostname:
            raise ValueError("the URL names no TCP host for the proxy to stand in for")
        return cls((parts.hostname, parts.port or default_port))

    # -- life ------------------------------------------------------------------------------
    def start(self) -> FaultProxy:
        """Listen (returns once `port` is known) and forward on a daemon thread."""
        if self._thread is not None:
            return self
        loop = asyncio.new_event_loop()
        self._loop = loop
        started = threading.Event()
        self._thread = threading.Thread(
            target=self._serve, args=(loop, started), name="faultproxy", daemon=True
        )
        self._thread.start()
        if not started.wait(CONTROL_TIMEOUT) or self._server is None:
            raise RuntimeError(f"the fault proxy to {self.upstream} did not start")
        return self

    def _serve(self, loop: asyncio.AbstractEventLoop, started: threading.Event) -> None:
        asyncio.set_event_loop(loop)

        async def listen() -> None:
            self._flowing = asyncio.Event()
            self._flowing.set()
            self._server = await asyncio.start_server(self._accept, self.host, self.port)
            self.port = int(self._server.sockets[0].getsockname()[1])

        try:
            loop.run_until_complete(listen())
        finally:
            started.set()
        if self._server is not None:
            loop.run_forever()
        loop.close()

    def close(self) -> None:
        """Stop listening and reset every connection; the thread ends."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            return

        async def shut() -> None:
            self._closing = True
            if self._server is not None:
                self._server.close()
            self._flowing.set()  # links waiting for a heal see the proxy closing
            for link in list(self._links):
                link.abort()
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            if others:
                await asyncio.wait(others, timeout=CONTROL_TIMEOUT / 2)

        with contextlib.suppress(Exception):
            self._call(shut())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(CONTROL_TIMEOUT)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.stats.accepted += 1
        link = _Link(self, (reader, writer))
        if self.refused_at is not None:  # refused: reset before anything is carried
            link.abort()
            return
        self._links.add(link)
        try:
            await link.run()
        finally:
            self._links.discard(link)

    # -- where to connect ------------------------------------------------------------------
    @property
    def address(self) -> tuple[str, int]:
        return self.host, self.port

    def url_for(self, url: str) -> str:
        """`url` (a `postgresql://` or any `scheme://user@host:port/...` URL) with its host
        and port replaced by the proxy's; user, password, path and query kept."""
        parts = urlsplit(url)
        if not parts.hostname:
            raise ValueError("the URL names no TCP host for the proxy to stand in for")
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = f"{userinfo}@" if userinfo else ""
        return urlunsplit(parts._replace(netloc=f"{netloc}{self.host}:{self.port}"))

    # -- faults ----------------------------------------------------------------------------
    def cut(self) -> None:
        """Stop forwarding in both directions without closing anything (a blackhole)."""

        async def apply() -> None:
            self._flowing.clear()
            self.cut_at = time.time()

        self._call(apply())

    def heal(self) -> None:
        """Forward again (what was held during a cut goes first, in order) and accept
        connections again after a `refuse()`."""

        async def apply() -> None:
            self._flowing.set()
            self.cut_at = None
            self.refused_at = None

        self._call(apply())

    @property
    def is_cut(self) -> bool:
        return self.cut_at is not None

    def delay(self, up_ms: float = 0.0, down_ms: float | None = None) -> None:
        """Delay each direction: `up_ms` client to server, `down_ms` server to client
        (default: as up). 0 and 0 make the link fast again."""
        down = up_ms if down_ms is None else down_ms
        if up_ms < 0 or down < 0:
            raise ValueError("a delay cannot be negative")

        async def apply() -> None:
            self._delay_s = {"up": up_ms / 1000, "down": down / 1000}

        self._call(apply())

    def reset_connections(self) -> int:
        """Reset (RST) every current connection at both ends; returns how many."""

        async def apply() -> int:
            links = list(self._links)
            for link in links:
                link.abort()
            return len(links)

        return self._call(apply())

    def close_connections(self) -> int:
        """Close (FIN) every current connection at both ends; returns how many."""

        async def apply() -> int:
            links = list(self._links)
            for link in links:
                link.close()
            return len(links)

        return self._call(apply())

    def refuse(self) -> int:
        """Reset (RST) every current connection and each new one until `heal()`;
        returns how many were open."""

        async def apply() -> int:
            self.refused_at = time.time()
            links = list(self._links)
            for link in links:
                link.abort()
            return len(links)

        return self._call(apply())

    @property
    def is_refusing(self) -> bool:
        return self.refused_at is not None

    @property
    def open_connections(self) -> int:
        """Client connections open right now (carried to the server or waiting for a heal)."""
        return len(self._links)

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the proxy's loop and wait for it: faults apply in call order."""
        if self._loop is None:
            raise RuntimeError("the fault proxy is not started")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(CONTROL_TIMEOUT)
