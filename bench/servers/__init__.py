"""Private servers of a run's own, shared by the benchmarks and the tests.

A PostgreSQL cluster (`postgres.PrivateCluster`: initdb and pg_ctl on a free port), a
JetStream server (`jetstream.PrivateNats`) and a PgBouncer (`pgbouncer.PgBouncer`), each
keeping its data in a temporary directory of its own that `close()` removes.

They live here, not under tests/, because the benchmarks start them too and must run
where only heartq and its extras are installed: bench/ imports nothing of tests/ (the
test harness needs the dev extra's packages), and tests/ imports these. The tests'
harnesses subclass each one to put its directory under the test run's scratch directory
(`scratch()`), which the next run removes if this one was killed.
"""

from __future__ import annotations

import contextlib
import secrets
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self


def free_port() -> int:
    """A TCP port of 127.0.0.1 free right now, for a server about to be started.

    Taken below the kernel's ephemeral range, never from it: a port the kernel hands out
    for `bind(0)` is one it also hands to outgoing connections, and between this pick and
    the server's own bind (a three-node cluster starts its nodes one after another, each
    connecting to the others) a connection of this run or another could take it, and the
    server would exit with its address in use. Never one this process handed out before
    (a cluster picks its nine ports before any node binds one). Where the ephemeral range
    leaves fewer than 1,000 ports above `PORTS_FROM`, the kernel's pick, as before."""
    low = ephemeral_low()
    if low - PORTS_FROM >= 1000:
        for _ in range(200):
            port = PORTS_FROM + secrets.randbelow(low - PORTS_FROM)  # `random` may be seeded
            if port in _handed_out:
                continue
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _handed_out.add(port)
            return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


PORTS_FROM = 20000
"""The least port `free_port` picks: above the well-known and most services' own."""

_handed_out: set[int] = set()
"""The ports `free_port` returned in this process."""


def ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's setting; 32768 elsewhere)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def log_tail(path: Path, lines: int = 30) -> str:
    """The last `lines` lines of a server's log (empty if it has none): what a failed
    start says about itself, put in the error that reports it."""
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return ""


class PrivateServer:
    """What the private servers share: where their directory goes, and a block's server."""

    def scratch(self) -> Path | None:
        """The directory this server's own temporary directory is made in (None: the
        system's); the tests' harnesses name their run's."""
        return None

    def make_dir(self, prefix: str) -> Path:
        """A fresh temporary directory for this server's data, configuration and log."""
        return Path(tempfile.mkdtemp(prefix=prefix, dir=self.scratch()))

    def close(self) -> None:
        """Stop the server and remove its directory."""
        raise NotImplementedError

    @classmethod
    @contextlib.contextmanager
    def running(cls, *args: Any, **kwargs: Any) -> Iterator[Self]:
        """A server of this class (made with these arguments) for the block, closed after."""
        server = cls(*args, **kwargs)
        try:
            yield server
        finally:
            server.close()
