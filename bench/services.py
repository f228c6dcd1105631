"""Redis for the RQ contender: the machine's own when it answers, else a private one.

A private `redis-server` runs on a free port in a temporary directory, keeps nothing on
disk, and is stopped when the run ends. PostgreSQL comes from `--server` (the test that
runs `--quick` passes the suite's server, private where none runs).
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from urllib.parse import urlsplit


def redis_answers(url: str) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379), 1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@contextlib.contextmanager
def redis(url: str) -> Iterator[str | None]:
    """A Redis URL that answers (`url`, else a private server's), or None if neither."""
    if redis_answers(url):
        yield url
        return
    binary = shutil.which("redis-server")
    if binary is None:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="heartq-bench-redis-") as tmp:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        proc = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", tmp],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        private = f"redis://127.0.0.1:{port}/9"
        try:
            deadline = time.monotonic() + 10
            while not redis_answers(private):
                if time.monotonic() > deadline:
                    raise RuntimeError("a private redis-server did not answer within 10 s")
                time.sleep(0.05)
            yield private
        finally:
            proc.terminate()
            proc.wait(10)
