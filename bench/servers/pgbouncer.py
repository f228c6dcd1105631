"""PgBouncer of a run's own: Debian's `pgbouncer`, started on a free port in front of a
PostgreSQL server, removed afterwards (`bench/recovery.py --pooler` measures through
one; the tests use it through `tests/pgbouncer_harness.py`).

`PgBouncer(server_url)` writes its configuration, an auth file and its log into a
temporary directory (under the test run's scratch directory in the tests), starts
`pgbouncer` in the foreground as a child process (as the `postgres` user when the tests
run as root: PgBouncer refuses root), and waits until it answers. Every database of the
server is reachable through it under its own name (`* = host=... port=...`), with trust
authentication for the server URL's user, so a test's schema on the shared server
(`tests/pg_harness.schema_url`) or a private cluster's database is reached through
`bouncer.url(of=that_url)`.

The pool mode is PgBouncer's `transaction` by default, the mode hosted poolers (Heroku,
Supabase, Neon, many Kubernetes setups) hand applications; `pool_size` is its
`default_pool_size`, the server sessions per database and user. Make it smaller than
the number of clients to have transactions of many clients share few server sessions.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict

from bench.servers import PrivateServer, free_port, log_tail

START_TIMEOUT = 20.0
"""Seconds PgBouncer gets to answer after it was started."""
STOP_TIMEOUT = 10.0


def pgbouncer_binary() -> str:
    """Debian's `pgbouncer` (in /usr/sbin, often off a user's PATH)."""
    found = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not Path(found).exists():
        raise RuntimeError(
            "no pgbouncer binary: install Debian's pgbouncer (scripts/test does: "
            "apt-get install -y pgbouncer)"
        )
    return found


def _run_as() -> str | None:
    """PgBouncer will not run as root: the user to run it as then."""
    if os.geteuid() != 0:
        return None
    for user in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(user)
            return user
    raise RuntimeError("running as root with no postgres or nobody user to run pgbouncer as")


class PgBouncer(PrivateServer):
    """A PgBouncer of the test's own in front of the server at `server_url`."""

    def __init__(
        self,
        server_url: str,
        *,
        pool_mode: str = "transaction",
        pool_size: int = 2,
        settings: Mapping[str, str] | None = None,
        connect_query: str | None = None,
    ) -> None:
        """`settings`: more lines of its `[pgbouncer]` section (`name = value`).
        `connect_query`: a statement PgBouncer runs on each server session it opens
        (session settings a pooler's operator gives every client)."""
        server = conninfo_to_dict(server_url)
        self.server_host = str(server.get("host") or "127.0.0.1")
        self.server_port = int(server.get("port") or 5432)
        self.user = str(server.get("user") or "postgres")
        self.pool_mode = pool_mode
        self.pool_size = pool_size
        self.connect_query = connect_query
        self.port = free_port()
        self.dir = self.make_dir("heartq-pgbouncer-")
        self.log_path = self.dir / "pgbouncer.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._write_config(dict(settings or {}))
        self.run_as = _run_as()
        if self.run_as is not None:
            shutil.chown(self.dir, user=self.run_as)
        self.start()

    def _write_config(self, settings: dict[str, str]) -> None:
        (self.dir / "users.txt").write_text(f'"{self.user}" ""\n')
        options = {
            "listen_addr": "127.0.0.1",
            "listen_port": str(self.port),
            "unix_socket_dir": "",
            "auth_type": "trust",
            "auth_file": str(self.dir / "users.txt"),
            "admin_users": self.user,
            "pool_mode": self.pool_mode,
            "default_pool_size": str(self.pool_size),
            "min_pool_size": "0",
            "reserve_pool_size": "0",
            "max_client_conn": "1000",
            "logfile": str(self.log_path),
            **settings,
        }
        target = f"host={self.server_host} port={self.server_port}"
        if self.connect_query is not None:
            quoted = self.connect_query.replace("'", "''")
            target += f" connect_query='{quoted}'"
        lines = ["[databases]", f"* = {target}", ""]
        lines += ["[pgbouncer]", *(f"{k} = {v}" for k, v in options.items()), ""]
        (self.dir / "pgbouncer.ini").write_text("\n".join(lines))

    # -- the process -------------------------------------------------------------------
    def start(self) -> None:
        argv = [pgbouncer_binary(), str(self.dir / "pgbouncer.ini")]
        self.proc = subprocess.Popen(
            argv,
            cwd=self.dir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(self.dir / "stderr.log", "ab"),  # noqa: SIM115 - the child keeps it
            user=self.run_as,
        )
        deadline = time.monotonic() + START_TIMEOUT
        while not self.answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"pgbouncer did not start:\n{self.log_tail()}")
            time.sleep(0.05)

    def answers(self) -> bool:
        try:
            with psycopg.connect(self.url("pgbouncer"), autocommit=True, connect_timeout=2) as c:
                c.execute("SHOW VERSION")
            return True
        except psycopg.Error:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # PgBouncer's fast shutdown
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT)
        self.proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def log_tail(self, lines: int = 30) -> str:
        tails = (log_tail(self.dir / name, lines) for name in ("pgbouncer.log", "stderr.log"))
        return "\n".join(tail for tail in tails if tail)

    # -- URLs and the admin console ----------------------------------------------------
    def url(self, database: str = "postgres", *, of: str | None = None, **params: str) -> str:
        """`postgresql://user@127.0.0.1:<port>/<database>?<params>`: through PgBouncer.
        `of`: a URL of the server whose database and query to keep (a test's schema URL),
        `params` added to its query."""
        query: list[tuple[str, str]] = []
        if of is not None:
            parts = urlsplit(of)
            database = parts.path.lstrip("/") or database
            query = parse_qsl(parts.query, keep_blank_values=True)
        query += list(params.items())
        netloc = f"{self.user}@127.0.0.1:{self.port}"
        return urlunsplit(("postgresql", netloc, f"/{database}", urlencode(query), ""))

    def show(self, what: str) -> list[dict[str, Any]]:
        """A `SHOW <what>` of PgBouncer's admin console (`POOLS`, `STATS`, `SERVERS`...),
        as rows of dicts."""
        with psycopg.connect(self.url("pgbouncer"), autocommit=True, connect_timeout=5) as conn:
            cursor = conn.execute(f"SHOW {what}")
            names = [column.name for column in cursor.description or ()]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
