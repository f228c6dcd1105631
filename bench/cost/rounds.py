"""One contender's rounds: a fresh database, its enqueue and its work phase, each counted.

A phase's counts are the differences of the meter's snapshots around it (`phase_figures`):
what crossed the relay, the statements pg_stat_statements saw (reset at its start), the
tables' row counters, the WAL between the two LSNs (`waldump`), and under callgrind the
instructions of the backends that ran it (every contender's backend exits at the
phase's end, so its callgrind file is the phase's). Before each phase the meter waits
until the backends of the step before have exited.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from bench.cost import waldump
from bench.cost.cluster import CostCluster, Meter, Snapshot
from bench.cost.relay import CountingRelay
from bench.cost.report import per_job as per_job_of
from bench.pressure_contenders import HEARTQ, PGQUEUER
from bench.pressure_figures import Subject

ROOT = Path(__file__).resolve().parent.parent.parent
CONTENDERS = ROOT / "bench" / "contenders"
PHASES = ("enqueue", "work")


@dataclass(frozen=True)
class Contender:
    """A column of the table: a phase script and the options of its setting, and the
    same setting of its side script for bench.cpu_per_job."""

    name: str
    label: str
    script: str  # under bench/contenders
    options: tuple[str, ...]
    peer: bool  # runs in the peers' environment (.bench-venv)
    side: str  # its side script, for bench.cpu_per_job
    side_options: tuple[str, ...]
    match: str  # a substring of its workers' command line
    subject: Subject  # its schema, and how its finished jobs and its depth are read
    under_callgrind: tuple[str, ...] = ()  # more options for its phases there


LINEUP = {
    c.name: c
    for c in (
        Contender("heartq-thread", "heartq thread x 50", "heartq_phases.py",
                  ("--pool", "thread", "--concurrency", "50"), False, "heartq_side.py",
                  ("--backend", "postgresql", "--pool", "thread", "--concurrency", "50"),
                  "heartq worker", HEARTQ),
        Contender("heartq-async", "heartq async x 100", "heartq_phases.py",
                  ("--pool", "async", "--concurrency", "100"), False, "heartq_side.py",
                  ("--backend", "postgresql", "--pool", "async", "--concurrency", "100"),
                  "heartq worker", HEARTQ),
        Contender("pgqueuer", "pgqueuer batch 100", "pgqueuer_phases.py",
                  ("--claim", "100"), True, "pgqueuer_side.py", ("--batch", "100"),
                  "pgqueuer_side.py --work", PGQUEUER, ("--heartbeat-timeout", "300")),
    )
}  # fmt: skip


def phase_figures(
    jobs: int,
    before: Snapshot,
    after: Snapshot,
    statements: list[dict[str, Any]],
    wal: waldump.WalSummary,
    instructions: int | None,
) -> dict[str, Any]:
    """A phase's figures (totals, not yet per job), with the details behind them."""
    traffic = after.traffic - before.traffic
    rows = [0, 0, 0, 0]
    by_table = {}
    for table, counts in after.tables.items():
        delta = [a - b for a, b in zip(counts, before.tables.get(table, (0, 0, 0, 0)), strict=True)]
        if any(delta):
            by_table[table] = delta
            rows = [r + d for r, d in zip(rows, delta, strict=True)]
    figures = {
        "statements": sum(s["calls"] for s in statements),
        "plans": sum(s["plans"] for s in statements),
        "round_trips": traffic.round_trips,
        "bytes_sent": traffic.sent,
        "bytes_received": traffic.received,
        "wal_bytes": wal.bytes,
        "wal_records": wal.records,
        "btree_entries": wal.btree_entries,
        "heap_lock_records": wal.heap_locks,
        "buffers_hit": sum(s["shared_blks_hit"] for s in statements),
        "buffers_dirtied": sum(s["shared_blks_dirtied"] for s in statements),
        "rows_inserted": rows[0],
        "rows_updated": rows[1],
        "rows_deleted": rows[2],
        "rows_hot_updated": rows[3],
    }
    if instructions is not None:
        figures["server_instructions"] = instructions
    return {
        "jobs": jobs,
        "figures": figures,
        "connections": traffic.connections,
        "tables": by_table,
        "wal": wal.as_dict(),
        "statements": [{**s, "query": " ".join(str(s["query"]).split())[:160]} for s in statements],
    }


@contextlib.contextmanager
def fresh_database(cluster: CostCluster, database: str) -> Iterator[Path]:
    """A new, empty `database` on `cluster` (dropped first if a run left it; the WAL
    checkpointed, so a round's holds no full-page image of what came before), and a
    scratch directory; both removed at the end."""
    named = sql.Identifier(database)
    admin = cluster.url_for("postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(named))
        conn.execute("CHECKPOINT")
        conn.execute(sql.SQL("CREATE DATABASE {}").format(named))
    scratch = Path(tempfile.mkdtemp(prefix="heartq-cost-"))
    try:
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(named))


def run_quietly(command: list[str]) -> None:
    """Run a phase; its workers' logs are shown only if it fails."""
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr[-4000:]}")


class Rounds:
    """Counts phases on `cluster` through `relay`; `python`: heartq's interpreter and
    the peers'."""

    def __init__(
        self,
        cluster: CostCluster,
        relay: CountingRelay,
        python: dict[bool, Path],
        batch: int,
        keep_callgrind: Path | None = None,
    ) -> None:
        self.cluster, self.relay, self.python, self.batch = cluster, relay, python, batch
        self.keep_callgrind = keep_callgrind  # each phase's callgrind files moved under it

    def both_sizes(
        self, contenders: list[Contender], jobs: int
    ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, dict[str, float]]]]:
        """Rounds of `jobs` and twice as many for each contender: their figures, and
        the marginal figures per job of each phase."""
        raw: dict[str, dict[str, Any]] = {c.name: {} for c in contenders}
        under = " under callgrind" if self.cluster.callgrind_dir else ""
        for size in (jobs, 2 * jobs):
            for contender in contenders:
                print(f"cost: {contender.label}, {size:,} jobs{under}", flush=True)
                raw[contender.name][str(size)] = self.run(contender, size)
        per_job = {
            name: {p: per_job_of(by_size[str(jobs)][p], by_size[str(2 * jobs)][p]) for p in PHASES}
            for name, by_size in raw.items()
        }
        return raw, per_job

    def command(
        self, contender: Contender, phase: str, url: str, scratch: Path, jobs: int
    ) -> list[str]:
        return [
            str(self.python[contender.peer]), str(CONTENDERS / contender.script), phase,
            "--url", url, "--dir", str(scratch), "--jobs", str(jobs), "--batch", str(self.batch),
            *contender.options, *(contender.under_callgrind if self.cluster.callgrind_dir else ()),
        ]  # fmt: skip

    def run(self, contender: Contender, jobs: int) -> dict[str, Any]:
        """One round of `jobs`: both phases' figures."""
        database = f"cost_{contender.name.replace('-', '_')}"
        with fresh_database(self.cluster, database) as scratch:
            direct = self.cluster.url_for(database)
            relayed = self.cluster.url_for(database, port=self.relay.port)
            meter = Meter(self.cluster, database, self.relay)
            try:
                run_quietly(self.command(contender, "setup", direct, scratch, jobs))
                commands = {p: self.command(contender, p, relayed, scratch, jobs) for p in PHASES}
                return {
                    p: self.phase(meter, commands[p], jobs, scratch, f"{contender.name}-{jobs}-{p}")
                    for p in PHASES
                }
            finally:
                meter.close()

    def phase(
        self, meter: Meter, command: list[str], jobs: int, scratch: Path, name: str
    ) -> dict[str, Any]:
        """One phase's figures; under callgrind with `keep_callgrind`, its backends' files
        are kept in a directory `name` there (for `callgrind_annotate`: where the
        instructions go, by function)."""
        meter.settle()
        self.cluster.clear_callgrind()
        meter.reset_statements()
        before = meter.snapshot()
        run_quietly(command)
        meter.settle()
        after = meter.snapshot()
        statements = meter.statements()
        instructions = self.cluster.callgrind_total()
        if self.keep_callgrind is not None:
            self.cluster.move_callgrind(self.keep_callgrind / name)
        records = scratch / "wal.txt"
        waldump.dump(
            self.cluster.waldump, self.cluster.data / "pg_wal", before.lsn, after.lsn, records
        )
        with records.open() as lines:
            names = meter.relation_names(waldump.relations(lines))
        with records.open() as lines:
            wal = waldump.summarize(lines, names)
        records.unlink()
        return phase_figures(jobs, before, after, statements, wal, instructions)
