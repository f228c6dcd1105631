"""A private three-node JetStream cluster: three `nats-server -js` processes on free
ports, joined by cluster routes, each with its own store under one temporary directory,
for the tests and runs that lose a stream leader, freeze a node or cut a route
(docs/NATS.md, "Running on a cluster"). Never the shared server on 4222: a node is
killed, stopped and restarted here.

A node can be SIGKILLed and started again (its store survives: it rejoins and catches
up), or frozen (`SIGSTOP`) and thawed (`SIGCONT`): a frozen node keeps its sockets open,
so its clients see silence rather than a closed connection, as on a stalled VM.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.servers import PrivateServer, free_port, log_tail
from bench.servers.jetstream import _info, nats_server_binary

CLUSTER_NAME = "hqc"


class Node:
    """One server of the cluster: its client, route and monitoring ports, its store."""

    def __init__(self, name: str, directory: Path) -> None:
        self.name = name
        self.port = free_port()
        self.route_port = free_port()
        self.http_port = free_port()
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen[bytes] | None = None
        self.frozen = False
        self.advertise: str | None = None
        """`host:port` the node tells its peers to route to (`cluster.advertise`), None:
        its own route port. Peers connect there only for a node they have no route to
        and no configured route for (NATS's route gossip)."""

    @property
    def address(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def config(self, routes: list[int]) -> str:
        """The node's configuration file: JetStream on, its routes to every node."""
        route_urls = ", ".join(f'"nats-route://127.0.0.1:{p}"' for p in routes)
        advertise = f'  advertise: "{self.advertise}"\n' if self.advertise else ""
        return (
            f'server_name: "{self.name}"\n'
            f'listen: "127.0.0.1:{self.port}"\n'
            f'http: "127.0.0.1:{self.http_port}"\n'
            f'jetstream {{ store_dir: "{self.dir / "store"}" }}\n'
            f"cluster {{\n"
            f'  name: "{CLUSTER_NAME}"\n'
            f'  listen: "127.0.0.1:{self.route_port}"\n'
            f"  routes: [{route_urls}]\n"
            f"{advertise}"
            f"}}\n"
        )

    def start(self, routes: list[int]) -> None:
        conf = self.dir / "server.conf"
        conf.write_text(self.config(routes))
        log = open(self.dir / "server.log", "ab")  # noqa: SIM115 - the server keeps it
        self.proc = subprocess.Popen(
            [nats_server_binary(), "-c", str(conf)], stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        self.frozen = False
        deadline = time.monotonic() + 20
        while _info("127.0.0.1", self.port) is None:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(
                    f"nats-server {self.name} did not start: {self.dir}\n"
                    + log_tail(self.dir / "server.log")
                )
            time.sleep(0.05)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> float:
        """SIGKILL the node (no goodbye to its peers or clients); when, by the monotonic
        clock."""
        assert self.proc is not None
        if self.frozen:
            self.thaw()
        self.proc.kill()
        at = time.monotonic()
        self.proc.wait(10)
        self.proc = None
        return at

    def freeze(self) -> float:
        """SIGSTOP: the process stops answering anyone, its sockets stay open."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)
        self.frozen = True
        return time.monotonic()

    def thaw(self) -> float:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)
        self.frozen = False
        return time.monotonic()

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.frozen:
            self.thaw()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def monitor(self, path: str) -> dict[str, Any]:
        """The node's monitoring endpoint `path` (`jsz?streams=1`, `routez`), as JSON."""
        url = f"http://127.0.0.1:{self.http_port}/{path}"
        with urllib.request.urlopen(url, timeout=2) as answer:
            data: dict[str, Any] = json.loads(answer.read())
            return data


class PrivateCluster(PrivateServer):
    """Three JetStream nodes clustered on 127.0.0.1 (module docstring), started here and
    removed by `close()`."""

    def __init__(self, size: int = 3) -> None:
        self.dir = self.make_dir("heartq-natscluster-")
        self.nodes = [Node(f"n{i + 1}", self.dir / f"n{i + 1}") for i in range(size)]
        try:
            for node in self.nodes:
                node.start(self.routes_for(node))
            self.wait_ready()
        except BaseException:
            self.close()
            raise

    @property
    def routes(self) -> list[int]:
        return [node.route_port for node in self.nodes]

    @property
    def servers(self) -> str:
        """Every node's address, comma-separated: a transport URL's server list."""
        return ",".join(node.address for node in self.nodes)

    def routes_for(self, node: Node) -> list[int]:
        """The ports `node`'s routes name: every node's route port (a node skips its
        own); a subclass may put something between the nodes."""
        _ = node
        return self.routes

    def node(self, name: str) -> Node:
        return next(node for node in self.nodes if node.name == name)

    def restart(self, node: Node) -> None:
        node.start(self.routes_for(node))

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Until every running node sees a JetStream meta leader (the cluster formed)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if all(
                    n.monitor("jsz").get("meta_cluster", {}).get("leader")
                    for n in self.nodes
                    if n.running and not n.frozen
                ):
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the JetStream cluster did not form: {self.dir}")
            time.sleep(0.1)

    def stream_leader(self, stream: str) -> str | None:
        """The name of the node leading `stream` now, as a running node reports it."""
        for node in self.nodes:
            if not node.running or node.frozen:
                continue
            try:
                data = node.monitor("jsz?streams=1")
            except OSError:
                continue
            for account in data.get("account_details", []):
                for detail in account.get("stream_detail", []):
                    if detail.get("name") == stream:
                        leader = detail.get("cluster", {}).get("leader")
                        if leader:
                            return str(leader)
        return None

    def stream_replicas(self, stream: str) -> int | None:
        """The stream's configured replicas, as a running node reports it."""
        for node in self.nodes:
            if not node.running or node.frozen:
                continue
            try:
                data = node.monitor("jsz?streams=1&config=1")
            except OSError:
                continue
            for account in data.get("account_details", []):
                for detail in account.get("stream_detail", []):
                    if detail.get("name") == stream:
                        return int(detail.get("config", {}).get("num_replicas", 1))
        return None

    def route_peers(self, node: Node) -> set[str]:
        """The names of the nodes `node` has a route to now (its `routez`; a peer not
        answering its own `varz` right now is named by its server id)."""
        ids = {}
        for other in self.nodes:
            if other is not node and other.running and not other.frozen:
                with contextlib.suppress(OSError):
                    ids[other.monitor("varz")["server_id"]] = other.name
        routes = node.monitor("routez").get("routes") or []
        return {ids.get(r["remote_id"], r["remote_id"]) for r in routes}

    def close(self) -> None:
        for node in self.nodes:
            node.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
