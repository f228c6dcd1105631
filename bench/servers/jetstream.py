"""A JetStream server: the shared one on 127.0.0.1:4222 when it answers with JetStream
on, else a private `nats-server -js` on a free port (`PrivateNats`), with streams and
subjects of a random name, deleted afterwards. `bench/transport_latency.py` measures
with it; the transport's tests use it through `tests/nats_harness.py`."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from bench.servers import PrivateServer, free_port, log_tail

SHARED = ("127.0.0.1", 4222)


def _info(host: str, port: int) -> dict[str, object] | None:
    """The server's INFO line (a NATS server sends it on connect), or None."""
    try:
        with socket.create_connection((host, port), timeout=1.0) as sock:
            sock.settimeout(1.0)
            line = sock.makefile("rb").readline()
    except OSError:
        return None
    if not line.startswith(b"INFO "):
        return None
    info: dict[str, object] = json.loads(line[5:])
    return info


def nats_server_binary() -> str:
    found = shutil.which("nats-server") or "/usr/sbin/nats-server"
    if not Path(found).exists():
        raise RuntimeError("no nats-server binary to start a private JetStream server")
    return found


class PrivateNats(PrivateServer):
    """`nats-server -js` on a free port with its own store directory, which survives a
    `stop()` and `start()` (the stream and consumers come back with the server)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = self.make_dir("heartq-nats-")
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    @property
    def address(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        argv = [nats_server_binary(), "-js", "-a", "127.0.0.1", "-p", str(self.port)]
        argv += ["-sd", str(self.dir)]
        log = open(self.dir / "server.log", "ab")  # noqa: SIM115 - the server keeps it
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 20
        while _info("127.0.0.1", self.port) is None:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                log = self.dir / "server.log"
                raise RuntimeError(f"nats-server did not start: {log}\n{log_tail(log)}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def names() -> str:
    """A transport URL query of a stream and subjects no other test uses."""
    tag = uuid.uuid4().hex[:12]
    return f"stream=HQT_{tag}&prefix=hqt_{tag}.jobs"


@contextlib.contextmanager
def server_address(private: type[PrivateNats] = PrivateNats) -> Iterator[str]:
    """`nats://host:port` of a JetStream server: the shared one if it answers, else a
    `private` one for the duration."""
    info = _info(*SHARED)
    if info is not None and info.get("jetstream"):
        yield f"nats://{SHARED[0]}:{SHARED[1]}"
        return
    server = private()
    try:
        yield server.address
    finally:
        server.close()


def delete_stream(url: str, deployment: str | None = None) -> None:
    """Delete the stream a test's transport URL names (`stream=`), or without one the
    stream of `deployment` (a queue database's id); its consumers go with it."""
    from heartq.event_stream import EventStream
    from heartq.transport.nats import NatsTransport
    from heartq.transport.settings import NatsOptions

    if deployment is None and NatsOptions.parse(url).stream is None:
        raise ValueError(f"{url} names no stream: say whose deployment's to delete")
    transport = NatsTransport(url, lambda: deployment or "unused", EventStream())
    try:
        deadline = time.monotonic() + 5
        while not transport.available and time.monotonic() < deadline:
            time.sleep(0.05)
        transport.delete_stream()
    finally:
        transport.close()
