"""A PostgreSQL cluster of a run's own: `initdb` and `pg_ctl` on a free port in a
temporary directory, removed afterwards; safe to stop, kill and restart.

The binaries are Debian's (/usr/lib/postgresql/*/bin, the newest) or the `pgserver`
wheel's. As root, initdb and postgres run as `postgres` (or a system user made for it):
they refuse root. `bench/fleet.py` measures on one; the tests' `tests/pg_harness.py`
uses it for every test that stops or kills a server, and where no shared server answers.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import re
import shutil
import subprocess
from pathlib import Path

from bench.servers import PrivateServer, free_port

PRIVATE_USER = "heartqpg"
"""The system user made to run the cluster as when running as root with no `postgres`."""


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


def run_as() -> list[str]:
    """initdb and postgres refuse to run as root: run them as an unprivileged user."""
    if os.geteuid() != 0:
        return []
    for user in ("postgres", PRIVATE_USER):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(user)
            return ["runuser", "-u", user, "--"]
    subprocess.run(["useradd", "--system", "--no-create-home", PRIVATE_USER], check=True)
    return ["runuser", "-u", PRIVATE_USER, "--"]


class PrivateCluster(PrivateServer):
    """A PostgreSQL cluster of our own: safe to stop, kill and restart in tests.

    Made with `initdb`, or, with `standby_of`, with `pg_basebackup -R` from that running
    cluster: then it starts as a hot standby streaming from it (a streaming pair and its
    failover: `tests/pg_replication.py`)."""

    def __init__(
        self,
        settings: dict[str, str] | None = None,
        *,
        standby_of: PrivateCluster | None = None,
        name: str | None = None,
        port: int | None = None,
    ) -> None:
        """`settings`: server settings of this cluster's own (`-c name=value`), over the
        defaults (`fsync=off`: its data is thrown away). `standby_of`: the primary to copy
        and follow, through a physical replication slot named `name` (which is also the
        standby's `application_name` there, the name `synchronous_standby_names` lists).
        `port`: this one (a port an earlier cluster let go) instead of a free one."""
        self.settings = {"listen_addresses": "127.0.0.1", "fsync": "off", **(settings or {})}
        bin_dir = pg_bin_dir()
        if bin_dir is None:
            raise RuntimeError(
                "no PostgreSQL binaries: install Debian's postgresql or `pip install pgserver`"
            )
        self.bin = bin_dir
        self.prefix = run_as()
        self.root = self.make_dir("heartq-pg-")
        self.data = self.root / "data"
        self.port = port or free_port()
        self.name = name
        if self.prefix:
            user = self.prefix[2]
            shutil.chown(self.root, user=user)
        try:
            if standby_of is None:
                self.init_data()
            else:
                self._base_backup(standby_of)
            self.start()
        except BaseException:
            self.close()
            raise
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def init_data(self) -> None:
        """Make the cluster's data directory (`self.data`): `initdb`, without the fsyncs
        (its data is thrown away; 1 s of the 2 s initdb took on a busy 2-core machine).
        The tests' subclass copies a run's own template instead."""
        self.initdb(self.data)

    def initdb(self, data: Path) -> None:
        """`initdb` into `data` (as this cluster's user)."""
        self._pg("initdb", "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
                 "--no-sync")  # fmt: skip

    def _base_backup(self, primary: PrivateCluster) -> None:
        """Copy `primary` with its WAL streamed alongside (`-X stream`), create its
        replication slot (`-C -S`), and write the standby's settings (`-R`: standby.signal
        and `primary_conninfo`, whose `application_name` names this standby)."""
        if not self.name or not re.fullmatch(r"[a-z0-9_]{1,63}", self.name):
            raise ValueError(f"a standby needs a slot name of [a-z0-9_], got {self.name!r}")
        conninfo = f"host=127.0.0.1 port={primary.port} user=postgres application_name={self.name}"
        self._pg("pg_basebackup", "-D", str(self.data), "-d", conninfo, "-X", "stream",
                 "-R", "-C", "-S", self.name, "--checkpoint", "fast")  # fmt: skip

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

    def promote(self) -> None:
        """A standby stops following and becomes a primary (`pg_ctl promote`, which waits
        until it accepts writes)."""
        self._pg("pg_ctl", "-D", str(self.data), "-w", "promote")

    def postmaster_pid(self) -> int:
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)
