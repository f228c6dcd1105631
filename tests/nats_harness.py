"""A JetStream server for the transport's tests: the shared one on 127.0.0.1:4222 when it
answers with JetStream on, else a private `nats-server -js` the test starts. Each test
gets its own stream and subjects (a random name), deleted afterwards; tests that stop and
restart a server always use a private one (`PrivateNats`), and those that need a cluster
a private three-node one (`PrivateCluster`). The code is
`bench/servers/jetstream.py`'s, which the benchmarks share; the private servers' data
goes under the run's scratch directory here (`tests/leftovers.py`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from bench.servers import jetstream, jetstream_cluster
from bench.servers.jetstream import delete_stream, names
from tests import leftovers

__all__ = ["PrivateCluster", "PrivateNats", "delete_stream", "names", "server_address"]


class PrivateNats(jetstream.PrivateNats):
    def scratch(self) -> Path:
        return leftovers.scratch_dir()


class PrivateCluster(jetstream_cluster.PrivateCluster):
    """Three JetStream nodes of the test's own (never the shared server: its nodes are
    killed and frozen), under the run's scratch directory."""

    def scratch(self) -> Path:
        return leftovers.scratch_dir()


@contextlib.contextmanager
def server_address() -> Iterator[str]:
    """`nats://host:port` of a JetStream server: the shared one, else a private one."""
    with jetstream.server_address(PrivateNats) as address:
        yield address
