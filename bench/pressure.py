"""heartq under the pressures that stop a PostgreSQL queue from vacuuming (issue 43).

Shaped like the cells of the public harness hardbyte/postgresql-job-queue-benchmarking,
on a private PostgreSQL cluster with its settings (autovacuum at PostgreSQL's defaults:
heartq's tables keep only what heartq's own migrations set), never the shared server:

    .venv/bin/python -m bench.pressure --rate 100 --phase-seconds 60
    .venv/bin/python -m bench.pressure --rate 500 --workers 2 --threads 20 \\
        --phases clean=120 held=240 recovery=120 readers=120 high=120 recovery=180 \\
        --contenders heartq pgqueuer --out /tmp/p.json
    .venv/bin/python -m bench.pressure --quick            # the code path, tiny

A producer enqueues no-op jobs at a fixed offered rate (`bench/pressure_load.py`);
`--workers` `heartq worker` processes at `--threads` slots each (every other setting at
heartq's defaults) run them; with `--contenders ... pgqueuer`, the same cells run
`--workers` pgqueuer processes at its defaults too (`bench/pressure_contenders.py`),
each contender in databases of its own. With `--fair-keys N`, heartq's jobs are spread
over N fairness keys, each job the next key in turn (as `python -m bench --fair-keys`).
Phases, in order, each `--phase-seconds` unless given as `name=seconds`:

- `clean`: the baseline;
- `held`: another session of the database holds a REPEATABLE READ snapshot and a
  transaction id, idle in transaction, for the whole phase;
- `readers`: four REPEATABLE READ sessions scan the jobs table every 0.1 s, each in one
  transaction for the phase;
- `high`: the offered rate times `--high-load` (1.5);
- `recovery`: the offered rate, nothing held.

Then the producer stops, the backlog drains (its time is reported), the workers stop,
and the figures are read from the database (`bench/pressure_figures.py` says how):
per phase, completions/s, pickup p50/p99 (heartq: `started_at - run_at`), queue depth, dead
tuples, sizes, autovacuum runs, WAL a job; then bytes per finished job after a VACUUM and the free
space by pgstattuple. A second, clean cell in a fresh database (`--storage-jobs` jobs at
the offered rate) gives the storage of a clean run. Figures are printed (a table per
cell, and Markdown with `--markdown`) and written as JSON with `--out`; never asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from bench import environment
from bench import pressure_figures as figures
from bench.fleet_stats import cpu_seconds
from bench.pressure_contenders import Contender, Heartq, Pgqueuer
from bench.pressure_load import Producer, Readers, SnapshotHolder, server_settings
from bench.servers.postgres import PrivateCluster
from bench.sigterm import unwind_on_sigterm
from bench.worker_processes import WorkerProcesses

PHASES = ("clean", "held", "readers", "high", "recovery")
ROOT = Path(__file__).resolve().parent.parent
Row = dict[str, Any]


@dataclass(frozen=True)
class Plan:
    rate: float = 100.0
    phases: tuple[tuple[str, float], ...] = tuple((name, 120.0) for name in PHASES)
    workers: int = 2
    threads: int = 10
    """Slots per worker: heartq's default concurrency."""
    high_load: float = 1.5
    readers: int = 4
    sample_every: float = 5.0
    storage_jobs: int = 20_000
    """Jobs of the clean storage cell (0: no such cell)."""
    drain_seconds: float = 900.0
    notes: list[str] = field(default_factory=list)


QUICK = Plan(rate=40.0, phases=tuple((name, 8.0) for name in PHASES), workers=1,
             threads=4, sample_every=2.0, storage_jobs=400, drain_seconds=120.0)  # fmt: skip


def run(plan: Plan, contenders: list[Contender], logs: Path | None = None) -> Row:
    """Each contender's cells on one private cluster: the figures as a JSON-able dict.
    With `logs`, the server's log and the workers' are copied there at the end (a stall
    is read from them: checkpoints, lock waits, autovacuum's passes)."""
    settings = server_settings()
    results: Row = {
        "plan": asdict(plan),
        "server_settings": settings,
        "cpus": os.cpu_count(),
        "load_at_start": list(os.getloadavg()),
        "cells": [],
    }
    cluster = PrivateCluster(settings)
    try:
        with tempfile.TemporaryDirectory(prefix="heartq-pressure-") as tmp:
            scratch = Path(tmp)
            for contender in contenders:
                results["cells"].append(cell(cluster, scratch, contender, "pressure", plan,
                                             plan.phases))  # fmt: skip
                if plan.storage_jobs:
                    clean = (("clean", plan.storage_jobs / plan.rate),)
                    results["cells"].append(cell(cluster, scratch, contender, "storage", plan,
                                                 clean))  # fmt: skip
            if logs is not None:
                shutil.copytree(scratch, logs / "workers", dirs_exist_ok=True)
    finally:
        if logs is not None:
            logs.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):
                shutil.copy(cluster.root / "log", logs / "postgres.log")
        cluster.close()
    results["load_at_end"] = list(os.getloadavg())
    return results


def cell(
    cluster: PrivateCluster,
    scratch: Path,
    contender: Contender,
    name: str,
    plan: Plan,
    phases: tuple[tuple[str, float], ...],
) -> Row:
    """One run of `phases` in a fresh database: the phases' figures, the drain, the
    check that every job ran once and succeeded, and the storage after a VACUUM."""
    subject = contender.subject
    database = f"{subject.name}_{name}"
    url = _database(cluster.url, database)
    contender.install(url)
    record: Row = {"cell": name, "contender": subject.name, "settings": contender.settings,
                   "failures": []}  # fmt: skip
    workers = contender.workers(url, scratch / database, plan.workers, plan.threads)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            _until(lambda: contender.workers_up(conn) >= plan.workers, 120, "workers up",
                   workers)  # fmt: skip
            sampler = figures.Sampler(url, subject, plan.sample_every)
            sampler.sample()
            sampler.start()
            producer = Producer(contender.enqueuer(url), plan.rate)
            producer.start()
            try:
                timeline = [_phase(url, subject, plan, producer, sampler, workers, kind,
                                   seconds) for kind, seconds in phases]  # fmt: skip
            finally:
                producer.stop()
            stopped = figures.clock(conn)
            record["enqueued"] = producer.enqueued
            record["drain_s"] = _drain(conn, subject, plan.drain_seconds, workers) - stopped
            sampler.sample()
            sampler.stop()
    finally:
        record["failures"] += workers.stop()
    with psycopg.connect(url, autocommit=True) as conn:
        record["phases"] = [
            figures.phase_figures(conn, subject, phase, sampler.samples) for phase in timeline
        ]
        waiting, odd = figures.unfinished(conn, subject)
        if waiting or odd:
            record["failures"].append(
                f"{waiting} jobs still waiting or running, {odd} ended otherwise or retried"
            )
        record["storage"] = figures.storage(conn, subject)
        record["fair_keys"] = figures.fair_keys(conn, subject)
    record["samples"] = sampler.samples
    _say(record)
    return record


def _phase(
    url: str,
    subject: figures.Subject,
    plan: Plan,
    producer: Producer,
    sampler: figures.Sampler,
    workers: WorkerProcesses,
    kind: str,
    seconds: float,
) -> Row:
    """Run one phase: its rate, its fault from start to end; its edges on the server's
    clock (the edge samples' times)."""
    rate = plan.rate * (plan.high_load if kind == "high" else 1.0)
    producer.set_rate(rate)
    producer.behind_s = 0.0
    with _fault(url, subject, plan, kind):
        start = sampler.sample()["t"]
        cpu_start = cpu_seconds(workers.pids)
        print(f"{time.strftime('%H:%M:%S')} {kind}: {seconds:.0f} s at {rate:.0f} jobs/s",
              flush=True)  # fmt: skip
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if workers.exited():
                raise RuntimeError(f"a worker exited during {kind}: {workers.exited()}")
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        end = sampler.sample()["t"]
        cpu = cpu_seconds(workers.pids) - cpu_start
    return {"name": kind, "rate": rate, "start": start, "end": end,
            "producer_behind_s": producer.behind_s, "worker_cpu_s": cpu}  # fmt: skip


@contextmanager
def _fault(url: str, subject: figures.Subject, plan: Plan, kind: str) -> Iterator[None]:
    """The phase's fault, held for the block: a snapshot, readers, or nothing."""
    if kind == "held":
        holder = SnapshotHolder(url)
        holder.start()
        try:
            yield
        finally:
            holder.release()
    elif kind == "readers":
        readers = Readers(url, sql.Identifier(subject.schema, subject.tables[0]), plan.readers)
        readers.start()
        try:
            yield
        finally:
            readers.release()
    elif kind in PHASES:
        yield
    else:
        raise ValueError(f"no such phase: {kind!r} (one of {', '.join(PHASES)})")


def _drain(
    conn: psycopg.Connection[Any],
    subject: figures.Subject,
    seconds: float,
    workers: WorkerProcesses,
) -> float:
    """Wait until no job waits or runs (up to `seconds`): the server's clock then."""
    waiting = _until(lambda: figures.unfinished(conn, subject)[0] == 0, seconds, None, workers)
    if not waiting:
        print(f"the backlog did not drain within {seconds:.0f} s", flush=True)
    return figures.clock(conn)


def _until(
    condition: Any, seconds: float, what: str | None, workers: WorkerProcesses, poll: float = 0.5
) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if workers.exited():
            raise RuntimeError(f"a worker exited: {workers.exited()}")
        if time.monotonic() > deadline:
            if what is None:
                return False
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(poll)
    return True


def _database(server: str, name: str) -> str:
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return server.rsplit("/", 1)[0] + f"/{name}"


HEADER = ("phase", "s", "offered", "enq/s", "done/s", "p50 ms", "p99 ms", "p99 last min",
          "depth end (max)", "dead end (max)", "table+idx MB", "autovacuum runs",
          "horizon age", "load", "WAL B/job (full pages)", "WAL flushes/s (ms)",
          "worker CPU us/job")  # fmt: skip
"""The columns of a cell's table; dead tuples and sizes are of its queue's first table."""


def rows(record: Row) -> list[list[str]]:
    """A cell's phases as table rows (the HEADER's columns)."""
    out = []
    for p in record["phases"]:
        runs = "/".join(str(n) for n in p["autovacuum_runs"].values())
        size = (p["table_bytes_end"] + p["index_bytes_end"]) / 1e6
        out.append([
            p["phase"], f"{p['seconds']:.0f}", f"{p['offered_rate']:.0f}",
            f"{p['enqueued_per_s']:.0f}", f"{p['completed_per_s']:.0f}",
            _num(p["pickup_p50_ms"]), _num(p["pickup_p99_ms"]),
            _num(p["pickup_p99_last_minute_ms"]),
            f"{p['depth_end']:,} ({p['depth_max']:,})", f"{p['dead_end']:,} ({p['dead_max']:,})",
            f"{size:.1f}", runs, f"{p['horizon_age_max']:,}", f"{p['load_max']:.1f}",
            _wal(p), _flushes(p), _num(p.get("worker_cpu_us_per_job")),
        ])  # fmt: skip
    return out


def _wal(phase: Row) -> str:
    if phase.get("wal_bytes_per_job") is None:
        return "-"
    return f"{phase['wal_bytes_per_job']:,.0f} ({phase['wal_fpi_per_job']:.2f})"


def _flushes(phase: Row) -> str:
    if phase.get("wal_syncs_per_s") is None:
        return "-"
    return f"{phase['wal_syncs_per_s']:,.0f} ({_num(phase.get('wal_sync_mean_ms'))})"


def _num(ms: float | None) -> str:
    if ms is None:
        return "-"
    return f"{ms:,.0f}" if ms >= 100 else f"{ms:.1f}"


def storage_line(record: Row) -> str:
    s = record["storage"]
    per_table = ", ".join(f"{name} {t['total_bytes'] / 1e6:.1f} MB ({t['free_percent']:.0f} % free)"
                          for name, t in s["tables"].items())  # fmt: skip
    per_job = s["bytes_per_finished_job"]
    return (f"{record['contender']} {record['cell']}: {s['finished_jobs']:,} finished jobs, "
            f"after VACUUM {per_job:,.0f} B a job ({per_table}); "
            f"drained in {record['drain_s']:.1f} s")  # fmt: skip


def title(record: Row) -> str:
    return f"{record['contender']}, {record['cell']} cell ({record['settings']}):"


def markdown(results: Row) -> str:
    lines = []
    for record in results["cells"]:
        if len(record["phases"]) > 1:
            lines += [title(record), ""]
            lines += ["| " + " | ".join(HEADER) + " |", "|" + " --- |" * len(HEADER)]
            lines += ["| " + " | ".join(row) + " |" for row in rows(record)]
            lines.append("")
        lines.append(f"- {storage_line(record)}")
    return "\n".join(lines)


def _say(record: Row) -> None:
    print(title(record))
    table = [list(HEADER), *rows(record)]
    widths = [max(len(r[i]) for r in table) for i in range(len(HEADER))]
    for row in table:
        print("  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)))
    print(storage_line(record))
    for failure in record["failures"]:
        print(f"FAILURE: {failure}")
    print(flush=True)


def parse_phases(specs: list[str], seconds: float) -> tuple[tuple[str, float], ...]:
    """`clean held=240 recovery` -> ((clean, seconds), (held, 240), (recovery, seconds))."""
    phases = []
    for spec in specs:
        kind, _, given = spec.partition("=")
        if kind not in PHASES:
            raise SystemExit(f"no such phase: {kind!r} (one of {', '.join(PHASES)})")
        phases.append((kind, float(given) if given else seconds))
    return tuple(phases)


def main() -> None:
    unwind_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=Plan.rate, help="offered jobs/s")
    parser.add_argument("--phase-seconds", type=float, default=120.0)
    parser.add_argument("--phases", nargs="+", default=list(PHASES),
                        help="name[=seconds] of: " + ", ".join(PHASES))  # fmt: skip
    parser.add_argument("--workers", type=int, default=Plan.workers, help="processes")
    parser.add_argument("--threads", type=int, default=Plan.threads, help="slots a worker")
    parser.add_argument("--high-load", type=float, default=Plan.high_load)
    parser.add_argument("--sample-every", type=float, default=Plan.sample_every)
    parser.add_argument("--storage-jobs", type=int, default=Plan.storage_jobs)
    parser.add_argument("--contenders", nargs="+", choices=["heartq", "pgqueuer"],
                        default=["heartq"], help="pgqueuer runs in --venv")  # fmt: skip
    parser.add_argument("--venv", type=Path, default=ROOT / ".bench-venv",
                        help="the peers' environment (made if missing)")  # fmt: skip
    parser.add_argument("--fair-keys", type=int, default=0,
                        help="heartq: jobs over this many fairness keys, in turn")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="tiny sizes: the code path")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables")
    parser.add_argument("--logs", type=Path, help="keep the server's and workers' logs here")
    args = parser.parse_args()
    plan = QUICK if args.quick else Plan(
        rate=args.rate, phases=parse_phases(args.phases, args.phase_seconds),
        workers=args.workers, threads=args.threads, high_load=args.high_load,
        sample_every=args.sample_every, storage_jobs=args.storage_jobs,
    )  # fmt: skip
    contenders: list[Contender] = [
        Heartq(args.fair_keys)
        if name == "heartq"
        else Pgqueuer(environment.peers_python(args.venv))
        for name in args.contenders
    ]
    results = run(plan, contenders, args.logs)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    if args.markdown:
        print(markdown(results))
    failures = [f for record in results["cells"] for f in record["failures"]]
    raise SystemExit(1 if failures else 0)


if __name__ == "__main__":
    main()
