"""A JetStream server for the transport's tests: the shared one on 127.0.0.1:4222 when it
answers with JetStream on, else a private `nats-server -js` the test starts. Each test
gets its own stream and subjects (a random name), deleted afterwards; tests that stop and
restart a server always use a private one (`PrivateNats`), and those that need a cluster
a private three-node one (`PrivateCluster`), or one whose nodes can be partitioned from
each other (`ProxiedCluster`). The code is
`bench/servers/jetstream.py`'s, which the benchmarks share; the private servers' data
goes under the run's scratch directory here (`tests/leftovers.py`)."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path

from bench.servers import jetstream, jetstream_cluster
from bench.servers.jetstream import delete_stream, names
from tests import leftovers
from tests.faultproxy import FaultProxy

__all__ = [
    "PrivateCluster", "PrivateNats", "ProxiedCluster", "delete_stream", "names",
    "server_address",
]  # fmt: skip


class PrivateNats(jetstream.PrivateNats):
    def scratch(self) -> Path:
        return leftovers.scratch_dir()


class PrivateCluster(jetstream_cluster.PrivateCluster):
    """Three JetStream nodes of the test's own (never the shared server: its nodes are
    killed and frozen), under the run's scratch directory."""

    def scratch(self) -> Path:
        return leftovers.scratch_dir()


class ProxiedCluster(PrivateCluster):
    """A private cluster whose routes can be cut: each node reaches each other node's
    route port through a `FaultProxy` of that ordered pair's own (six for three nodes),
    and `partition(name)` refuses every proxy to or from that node (its routes reset,
    each reconnection reset at once) until `heal()`: what NATS sees of a firewall
    between hosts, its routes lost (`route_peers`), the node's JetStream cut off from
    the others' (the majority elects leaders without it).

    Each node advertises a port that refuses (`Node.advertise`): NATS's route gossip
    would otherwise have a node that lost its route to another connect to that one's
    real route port, around the proxies, and a partition would not cut that route.
    """

    def __init__(self, size: int = 3) -> None:
        self.proxies: dict[tuple[str, str], FaultProxy] = {}
        self.partitioned: str | None = None
        """The node cut off from the others now, None while the cluster is whole."""
        self._refusing = socket.socket()  # bound, never listening: connections refused
        self._refusing.bind(("127.0.0.1", 0))
        try:
            super().__init__(size)
        except BaseException:
            self._close_links()
            raise

    def routes_for(self, node: jetstream_cluster.Node) -> list[int]:
        node.advertise = f"127.0.0.1:{self._refusing.getsockname()[1]}"
        ports = []
        for peer in self.nodes:
            if peer is node:
                continue
            proxy = self.proxies.get((node.name, peer.name))
            if proxy is None:
                proxy = FaultProxy(("127.0.0.1", peer.route_port)).start()
                self.proxies[(node.name, peer.name)] = proxy
            ports.append(proxy.port)
        return ports

    def partition(self, name: str) -> None:
        """Cut `name` off from every other node (both ways) until `heal()`."""
        for pair, proxy in self.proxies.items():
            if name in pair:
                proxy.refuse()
        self.partitioned = name

    def heal(self) -> None:
        """Every route may connect again (each node retries its routes every second)."""
        for proxy in self.proxies.values():
            proxy.heal()
        self.partitioned = None

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._close_links()

    def _close_links(self) -> None:
        for proxy in self.proxies.values():
            proxy.close()
        self._refusing.close()


@contextlib.contextmanager
def server_address() -> Iterator[str]:
    """`nats://host:port` of a JetStream server: the shared one, else a private one."""
    with jetstream.server_address(PrivateNats) as address:
        yield address
