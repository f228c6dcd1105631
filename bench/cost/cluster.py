"""The private cluster `bench.cost` counts on, optionally under callgrind, and its meter.

The cluster is `bench.servers.postgres.PrivateCluster` with the settings that make its
counts a job's and nothing else's:

- `pg_stat_statements` loaded, tracking top-level statements (a statement a client sent;
  what a function it calls runs is counted in it);
- `autovacuum = off`, `max_parallel_workers_per_gather = 0`, `jit = off`: no work the
  server does on its own time, no helper process a query would hand work to (callgrind
  counts only client backends), no compilation whose cost depends on its heuristics;
- `checkpoint_timeout = 1d`, `max_wal_size = 64GB`: no checkpoint inside a round, so
  the WAL holds no full-page image but of pages older than the round's CHECKPOINT;
- `fsync = off` (PrivateCluster's): the WAL written is the same, its flushes are free.

Under callgrind (`with_callgrind`) the postmaster runs as
`valgrind --tool=callgrind --trace-children=yes --toggle-collect=PostgresMain`: each
forked process writes `callgrind.out.<pid>` when it exits, counting only what it ran
inside `PostgresMain`, the loop of a client backend (a connection's start-up included,
the same in every run; background processes count nothing).

The meter is a connection of its own role (`cost_meter`, so pg_stat_statements tells
its statements from the contenders'), to the contender's database.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from bench.cost.relay import CountingRelay, Traffic
from bench.servers.postgres import PrivateCluster

SETTINGS = {
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.track": "top",
    "pg_stat_statements.max": "10000",
    "pg_stat_statements.track_planning": "on",  # `plans`: a statement planned again
    "autovacuum": "off",
    "max_parallel_workers_per_gather": "0",
    "jit": "off",
    "checkpoint_timeout": "1d",
    "max_wal_size": "64GB",
}
METER = "cost_meter"
CONTENDER_ROLE = "postgres"
SETTLE_TIMEOUT = 900.0
TOTALS = re.compile(rb"^(?:summary|totals): (\d+)", re.MULTILINE)


def ensure_valgrind() -> str:
    """valgrind's path, installed from Debian's packages first if it is missing."""
    found = shutil.which("valgrind")
    if found:
        return found
    if os.geteuid() != 0:
        raise SystemExit("valgrind is missing: apt-get install valgrind (or run --no-callgrind)")
    print("cost: installing valgrind (apt-get install valgrind)", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "-q", "valgrind"]
    if subprocess.run(install, env=env, check=False).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, check=True)
        subprocess.run(install, env=env, check=True)
    return shutil.which("valgrind") or "valgrind"


def single_user_instructions(
    cluster: PrivateCluster, database: str, script: str, out: Path, *, paragraphs: bool = False
) -> int:
    """The instructions one single-user backend (`postgres --single`, the cluster stopped)
    spends on `script` over `database` under callgrind, start-up included; its callgrind
    file is `out`. A statement's error raises. `paragraphs`: a statement ends at `;` and
    a blank line (`-j`: statements over several lines), not at each line's end."""
    command = [*cluster.prefix, ensure_valgrind(), "--tool=callgrind",
               f"--callgrind-out-file={out}", str(cluster.bin / "postgres"), "--single",
               *(["-j"] if paragraphs else []), "-D", str(cluster.data), database]  # fmt: skip
    done = subprocess.run(command, input=script.encode(), check=True, capture_output=True)
    if b"ERROR:" in done.stdout + done.stderr:  # a statement failed: its figure would be short
        raise RuntimeError((done.stdout + done.stderr).decode(errors="replace")[-2000:])
    found = TOTALS.findall(out.read_bytes())
    if not found:
        raise RuntimeError(f"no total in {out}")
    return int(found[-1])


class CostCluster(PrivateCluster):
    """A PrivateCluster with `SETTINGS`, started natively or under callgrind."""

    def __init__(self) -> None:
        self.callgrind_dir: Path | None = None
        self._valgrind: subprocess.Popen[bytes] | None = None
        super().__init__(dict(SETTINGS))
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE ROLE {METER} LOGIN SUPERUSER")
        self.waldump = self.bin / "pg_waldump"

    def server_version(self) -> str:
        with psycopg.connect(self.url_for("postgres")) as conn:
            row = conn.execute("SHOW server_version").fetchone()
        return str(row[0]).split()[0] if row else "?"

    def url_for(self, database: str, port: int | None = None, user: str = CONTENDER_ROLE) -> str:
        return f"postgresql://{user}@127.0.0.1:{port or self.port}/{database}"

    def with_callgrind(self, directory: Path | None) -> None:
        """Restart the cluster, under callgrind writing into `directory` (None: natively)."""
        self.stop()
        self.callgrind_dir = directory
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
            if self.prefix:
                shutil.chown(directory, user=self.prefix[2])
        self.start()

    def start(self) -> None:
        if self.callgrind_dir is None:
            super().start()
            return
        settings = [
            arg for name, value in self.settings.items() for arg in ("-c", f"{name}={value}")
        ]
        command = [
            *self.prefix, ensure_valgrind(), "--tool=callgrind", "--trace-children=yes",
            "--toggle-collect=PostgresMain",
            f"--callgrind-out-file={self.callgrind_dir}/callgrind.out.%p",
            str(self.bin / "postgres"), "-D", str(self.data), "-p", str(self.port),
            "-k", str(self.root), *settings,
        ]  # fmt: skip
        log = (self.root / "valgrind.log").open("ab")
        self._valgrind = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        while True:
            with contextlib.suppress(psycopg.OperationalError):
                psycopg.connect(self.url_for("postgres"), connect_timeout=5).close()
                return
            if self._valgrind.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"postgres under callgrind did not start: {self.root}/valgrind.log"
                )
            time.sleep(1)

    def stop(self, mode: str = "fast") -> None:
        super().stop(mode)
        if self._valgrind is not None:
            self._valgrind.wait(300)
            self._valgrind = None

    def children(self) -> set[int]:
        """The postmaster's child processes now."""
        postmaster, found = self.postmaster_pid(), set()
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                with contextlib.suppress(OSError, IndexError):
                    stat = Path(entry.path, "stat").read_text()
                    if int(stat.rsplit(")", 1)[1].split()[1]) == postmaster:
                        found.add(int(entry.name))
        return found

    def clear_callgrind(self) -> None:
        """Remove the callgrind files written so far (start-ups, the steps between phases)."""
        if self.callgrind_dir is not None:
            for path in self.callgrind_dir.glob("callgrind.out.*"):
                path.unlink()

    def move_callgrind(self, into: Path) -> None:
        """Move the callgrind files written since `clear_callgrind` into `into` (made)."""
        if self.callgrind_dir is not None:
            into.mkdir(parents=True, exist_ok=True)
            for path in self.callgrind_dir.glob("callgrind.out.*"):
                path.rename(into / path.name)

    def callgrind_total(self) -> int | None:
        """Instructions in the callgrind files written since `clear_callgrind` (None when
        not under callgrind). A live backend has written none yet."""
        if self.callgrind_dir is None:
            return None
        total = 0
        for path in self.callgrind_dir.glob("callgrind.out.*"):
            found = TOTALS.findall(path.read_bytes())
            total += int(found[-1]) if found else 0
        return total


@dataclass
class Snapshot:
    """The counters at a phase's edge."""

    lsn: str
    traffic: Traffic
    tables: dict[str, tuple[int, int, int, int]]


class Meter:
    """The measuring connection to a contender's database, on the cluster's own port."""

    def __init__(self, cluster: CostCluster, database: str, relay: CountingRelay) -> None:
        self.cluster, self.relay = cluster, relay
        self.conn = psycopg.connect(cluster.url_for(database, user=METER), autocommit=True)
        self.conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        self.conn.execute("SET stats_fetch_consistency = none")
        self.pid = self.conn.info.backend_pid

    def close(self) -> None:
        self.conn.close()

    def _value(self, query: str, params: tuple[Any, ...] = ()) -> Any:
        row = self.conn.execute(query, params).fetchone()
        return row[0] if row else None

    def settle(self) -> None:
        """Wait until the backends of the phase before have exited (their statistics and
        callgrind files written): the postmaster's children are its own processes and
        this connection's backend again."""
        resident = {self.pid} | {
            int(r[0])
            for r in self.conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE backend_type <> 'client backend'"
            )
        }
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while self.cluster.children() - resident:
            if time.monotonic() > deadline:
                raise TimeoutError("the phase's backends did not exit")
            time.sleep(0.2)

    def snapshot(self) -> Snapshot:
        """The counters now (after `settle`), the WAL written so far flushed."""
        lsn = str(self._value("SELECT pg_current_wal_insert_lsn()"))
        while not self._value("SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn", (lsn,)):
            time.sleep(0.05)
        rows = self.conn.execute(
            "SELECT schemaname || '.' || relname, n_tup_ins, n_tup_upd, n_tup_del, n_tup_hot_upd"
            " FROM pg_stat_user_tables"
        ).fetchall()
        tables = {str(r[0]): (int(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in rows}
        return Snapshot(lsn, self.relay.traffic(), tables)

    def reset_statements(self) -> None:
        self.conn.execute("SELECT pg_stat_statements_reset()")

    def statements(self) -> list[dict[str, Any]]:
        """The contender's statements in this database since the last reset."""
        cursor = self.conn.execute(
            "SELECT query, calls, plans, rows, shared_blks_hit, shared_blks_read,"
            " shared_blks_dirtied, shared_blks_written, wal_records, wal_bytes::bigint"
            " FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database"
            " WHERE datname = current_database())"
            " AND userid = (SELECT oid FROM pg_roles WHERE rolname = %s) ORDER BY calls DESC",
            (CONTENDER_ROLE,),
        )
        names = [d.name for d in cursor.description or []]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def relation_names(
        self, relations: set[tuple[int, int, int]]
    ) -> dict[tuple[int, int, int], str]:
        """Names of the relations of this database among `relations` (spc, db, filenode)."""
        database = int(
            self._value("SELECT oid FROM pg_database WHERE datname = current_database()")
        )
        names = {}
        for spc, db, node in relations:
            if db != database:
                names[(spc, db, node)] = f"(another database: {db}/{node})"
                continue
            name = self._value(
                "SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n"
                " ON n.oid = c.relnamespace WHERE c.oid = pg_filenode_relation(%s, %s)",
                (0 if spc == 1663 else spc, node),
            )
            names[(spc, db, node)] = str(name) if name else f"(filenode {node})"
        return names
