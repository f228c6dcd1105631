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
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self


def free_port() -> int:
    """A TCP port of 127.0.0.1 free right now, for a server about to be started."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
