"""PostgreSQL for the tests: the shared server when it answers, else a private cluster.

Order: `HEARTQ_TEST_PG_URL` if set; else the machine's server at 127.0.0.1:5432
(database `test`, user `postgres`); else a private cluster started here with `initdb` and
`pg_ctl` (Debian's binaries under /usr/lib/postgresql/*/bin, or the `pgserver` wheel's)
on a free port in a temporary directory, removed afterwards. Tests never silently skip
PostgreSQL: if none of these works, they fail with the reason.

Each test gets its own schema (`?schema=t_<random>`), dropped after the test.
Tests that must stop or kill a database use `PrivateCluster` directly, never the shared
server.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg

SHARED_URL = os.environ.get(
    "HEARTQ_TEST_PG_SHARED_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
"""Where the machine's own server is looked for (point it at a dead port to exercise the
private-cluster path, as on a machine with no PostgreSQL)."""
PRIVATE_USER = "heartqpg"


def _answers(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def pg_bin_dir() -> Path | None:
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: p.parts[-3])
    if debian:
        return debian[-1].parent
    spec = importlib.util.find_spec("pgserver")
    if spec and spec.origin:
        candidate = Path(spec.origin).parent / "pginstall" / "bin"
        if (candidate / "initdb").exists():
            return candidate
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run_as() -> list[str]:
    """initdb and postgres refuse to run as root: run them as an unprivileged user."""
    if os.geteuid() != 0:
        return []
    for user in ("postgres", PRIVATE_USER):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(user)
            return ["runuser", "-u", user, "--"]
    subprocess.run(["useradd", "--system", "--no-create-home", PRIVATE_USER], check=True)
    return ["runuser", "-u", PRIVATE_USER, "--"]


class PrivateCluster:
    """A PostgreSQL cluster of our own: safe to stop, kill and restart in tests."""

    def __init__(self, settings: dict[str, str] | None = None) -> None:
        """`settings`: server settings of this cluster's own (`-c name=value`), over the
        defaults (`fsync=off`: its data is thrown away)."""
        self.settings = {"listen_addresses": "127.0.0.1", "fsync": "off", **(settings or {})}
        bin_dir = pg_bin_dir()
        if bin_dir is None:
            raise RuntimeError(
                "no PostgreSQL binaries: install Debian's postgresql or `pip install pgserver`"
            )
        self.bin = bin_dir
        self.prefix = _run_as()
        self.root = Path(tempfile.mkdtemp(prefix="heartq-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        if self.prefix:
            user = self.prefix[2]
            shutil.chown(self.root, user=user)
        self._pg("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8")
        self.start()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _pg(self, tool: str, *args: str) -> None:
        subprocess.run(
            [*self.prefix, str(self.bin / tool), *args],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=self.root,
        )

    def start(self) -> None:
        settings = " ".join(f"-c {name}={value}" for name, value in self.settings.items())
        options = f"-p {self.port} -k {self.root} {settings}"
        self._pg("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.root / "log"),
                 "-w", "start")  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        self._pg("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def postmaster_pid(self) -> int:
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def server_url() -> Iterator[str]:
    """The URL of a PostgreSQL server tests may create schemas in."""
    override = os.environ.get("HEARTQ_TEST_PG_URL")
    if override:
        yield override
        return
    if _answers(SHARED_URL):
        yield SHARED_URL
        return
    cluster = PrivateCluster()
    try:
        deadline = time.monotonic() + 30
        while not _answers(cluster.url):
            if time.monotonic() > deadline:
                raise RuntimeError("the private PostgreSQL cluster did not start")
            time.sleep(0.1)
        yield cluster.url
    finally:
        cluster.close()


@contextlib.contextmanager
def schema_url(base: str) -> Iterator[str]:
    """A fresh schema on `base`, dropped afterwards."""
    schema = f"t_{uuid.uuid4().hex[:16]}"
    try:
        yield f"{base}?schema={schema}"
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
