"""A thousand slots on one PostgreSQL: 40 worker processes x 25 against 4 x 25.

The `fleet` section of `python -m bench` (`--only fleet`), or on its own:

    .venv/bin/python -m bench.fleet                       # 40 x 25 vs 4 x 25, 20,000 jobs
    .venv/bin/python -m bench.fleet --quick --out /tmp/f  # tiny sizes: the code path

Everything runs on a private cluster of its own (initdb in a temporary directory, fsync
on, `max_connections` sized as docs/OPERATIONS.md says: 3 per worker plus 10 for the
bench's own sessions, `pg_stat_statements` preloaded), never on the machine's shared
server. Two parts:

- **Processing.** For each fleet (the small one, then the large one, `--rounds` times
  in alternating order), a fresh database: the workers start against an empty queue and,
  once every one is registered, `--jobs` no-op jobs are enqueued in one call. The rate is
  jobs / (last `finished_at` - first `started_at`), both the server's clock, so worker
  start-up is not counted. Every job must succeed once (one execution, one attempt) and no
  worker may log an error. With it: the claim's calls, jobs per claim, mean and max
  (`pg_stat_statements`), its p50/p99 from the server's sampled duration log
  (`bench/fleet_stats.py` says how), the peak of the database's connections (and per
  worker), and commits/s (`pg_stat_database.xact_commit`) over the run.
- **Held.** The large fleet with jobs that sleep `--hold` seconds (10): once the slots
  are full, `--window` seconds (60: two heartbeat intervals at the default 30 s) of what
  a thousand running jobs cost: statements/s by statement, commits/s, and the CPU of the
  server's processes and of the workers'.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psycopg

from bench import fleet_stats as stats
from bench.servers.postgres import PrivateCluster
from bench.worker_processes import WorkerProcesses
from heartq.app import App

ROOT = Path(__file__).resolve().parent.parent
TASKS = """
import time
import heartq

app = heartq.App()

@app.task
def noop() -> None:
    return None

@app.task
def hold(seconds: float) -> None:
    time.sleep(seconds)
"""
M = stats.MARK
WORKER_APP = "heartq-fleet-worker"
"""The workers' `application_name` (libpq's PGAPPNAME): their connections, not the bench's."""
DONE = f"""{M} SELECT count(*) FROM heartq.jobs
WHERE status = 'succeeded' AND finished_at IS NOT NULL"""
CHECK = f"""{M}
SELECT count(*) FILTER (WHERE status = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE status <> 'succeeded') AS other,
       count(*) FILTER (WHERE attempts <> 1) AS retried,
       (SELECT count(*) FROM heartq.executions) AS executions,
       extract(epoch from max(finished_at) - min(started_at))::float8 AS span,
       count(DISTINCT worker_id) AS workers_used
FROM heartq.jobs
"""


@dataclass(frozen=True)
class Sizes:
    workers: int = 40
    baseline: int = 4
    concurrency: int = 25
    jobs: int = 20_000
    rounds: int = 2
    hold: float = 10.0
    window: float = 60.0
    sample_rate: float = 0.2
    """Share of statement executions the server logs with their duration."""
    heartbeat_interval: float | None = None
    """Workers' `--heartbeat-interval` (None: the default, 30 s)."""
    prefetch: int = 0
    """Workers' `--prefetch`: jobs each may claim ahead of its free slots (0: off, the
    default). Whether larger claims help a large fleet, whose few free slots per worker
    make small ones (they did not: BENCHMARKS.md, "A thousand slots")."""


FULL = Sizes()
QUICK = Sizes(
    workers=3,
    baseline=1,
    concurrency=4,
    jobs=300,
    rounds=1,
    hold=1.0,
    window=3.0,
    sample_rate=1.0,
    heartbeat_interval=1.0,
)


def run(sizes: Sizes) -> dict[str, Any]:
    """Both parts on a private cluster: the figures as a JSON-able dict."""
    connections = 3 * max(sizes.workers, sizes.baseline) + 10
    settings = stats.CLUSTER_SETTINGS | {
        "max_connections": str(connections),
        "log_statement_sample_rate": str(sizes.sample_rate),
    }
    results: dict[str, Any] = {
        "sizes": asdict(sizes),
        "server_settings": settings,
        "processing": [],
        "failures": [],
    }
    cluster = PrivateCluster(settings)
    try:
        _wait_for(cluster.url)
        with psycopg.connect(cluster.url, autocommit=True) as admin:
            admin.execute("CREATE EXTENSION pg_stat_statements")
        with tempfile.TemporaryDirectory(prefix="heartq-fleet-") as tmp:
            scratch = Path(tmp)
            (scratch / "fleet_tasks.py").write_text(TASKS)
            fleets = [sizes.baseline, sizes.workers]
            for number in range(sizes.rounds):
                for workers in fleets if number % 2 == 0 else fleets[::-1]:
                    record = processing(cluster, scratch, workers, sizes, number + 1)
                    _say(record)
                    results["processing"].append(record)
                    results["failures"] += record["failures"]
            held_record = held(cluster, scratch, sizes)
            _say(held_record)
            results["held"] = held_record
            results["failures"] += held_record["failures"]
    finally:
        cluster.close()
    results["summary"] = summarize(results)
    return results


def processing(
    cluster: PrivateCluster, scratch: Path, workers: int, sizes: Sizes, number: int
) -> dict[str, Any]:
    """One fleet through `sizes.jobs` no-op jobs in a fresh database."""
    database = f"fleet_{workers}_{number}"
    url = _database(cluster.url, database)
    record: dict[str, Any] = {
        "part": "processing",
        "round": number,
        "workers": workers,
        "concurrency": sizes.concurrency,
        "jobs": sizes.jobs,
    }
    app = App(url)
    app.migrate()
    with (
        psycopg.connect(cluster.url, autocommit=True) as admin,
        psycopg.connect(url, autocommit=True) as watch,
        _fleet(url, scratch, workers, sizes) as fleet,
    ):
        _until(lambda: _active(watch) >= workers, 300, "every worker registered", fleet)
        stats.reset_statements(admin)
        load = os.getloadavg()[0]
        peak = _Peak(cluster.url, database)
        before, polls = stats.commits(admin, database), 0
        postmaster = cluster.postmaster_pid()
        cpu = _CpuPerJob(postmaster, fleet.pids)
        started = time.monotonic()
        app.enqueue_many("noop", [{}] * sizes.jobs)
        while _count(watch, DONE) < sizes.jobs:
            polls += 1
            if time.monotonic() - started > 900 or fleet.failed():
                raise RuntimeError(f"{workers} workers did not get through {sizes.jobs} jobs")
            time.sleep(0.2)
        elapsed = time.monotonic() - started
        after = stats.commits(admin, database)
        server_us, workers_us = cpu.per_job(sizes.jobs)
        peak.stop()
        found = stats.statements(admin, database)
        row = watch.execute(CHECK).fetchone()
    record["failures"] = fleet.errors
    app.close()
    assert row is not None
    succeeded, other, retried, executions, span, used = row
    if (succeeded, other, retried, executions) != (sizes.jobs, 0, 0, sizes.jobs):
        record["failures"].append(
            f"{workers} workers: {succeeded} succeeded, {other} not, {retried} retried, "
            f"{executions} executions of {sizes.jobs} jobs"
        )
    sampled = stats.sampled_claims(cluster.data, database)
    record |= {
        "rate": sizes.jobs / span,
        "load_average": _load(load),
        "span_s": span,
        "workers_used": int(used),
        "commits_per_s": (after - before - polls - 1) / elapsed,
        "server_cpu_us_per_job": server_us,
        "workers_cpu_us_per_job": workers_us,
        "peak_connections": peak.value,
        "connections_per_worker": peak.value / workers,
        "claim": stats.claim_summary(found),
        "claim_sampled": {
            "n": len(sampled),
            "mean_ms": sum(sampled) / len(sampled) if sampled else None,
            **stats.percentiles(sampled, (50, 90, 99)),
        },
        "top_statements": found[:6],
    }
    _drop(cluster.url, database)
    return record


def held(cluster: PrivateCluster, scratch: Path, sizes: Sizes) -> dict[str, Any]:
    """What `workers x concurrency` running jobs of `hold` seconds cost over `window`."""
    database = "fleet_held"
    url = _database(cluster.url, database)
    slots = sizes.workers * sizes.concurrency
    jobs = int(slots * ((sizes.window + 120) / sizes.hold + 2))
    record: dict[str, Any] = {
        "part": "held",
        "workers": sizes.workers,
        "slots": slots,
        "hold_s": sizes.hold,
        "window_s": sizes.window,
        "jobs_enqueued": jobs,
    }
    app = App(url)
    app.migrate()
    with (
        psycopg.connect(cluster.url, autocommit=True) as admin,
        psycopg.connect(url, autocommit=True) as watch,
        _fleet(url, scratch, sizes.workers, sizes) as fleet,
    ):
        _until(lambda: _active(watch) >= sizes.workers, 300, "every worker registered", fleet)
        for offset in range(0, jobs, 5000):
            app.enqueue_many("hold", [{"seconds": sizes.hold}] * min(5000, jobs - offset))
        _until(lambda: _running(watch) >= 0.98 * slots, 300, f"{slots} jobs running", fleet)
        postmaster = cluster.postmaster_pid()
        stats.reset_statements(admin)
        before = stats.commits(admin, database)
        server_cpu = stats.cpu_seconds(stats.server_pids(postmaster))
        fleet_cpu = stats.cpu_seconds(fleet.pids)
        started, lowest, polls = time.monotonic(), slots, 0
        load = os.getloadavg()[0]
        while (elapsed := time.monotonic() - started) < sizes.window:
            lowest, polls = min(lowest, _running(watch)), polls + 1
            time.sleep(min(1.0, max(0.0, sizes.window - elapsed)))
        after = stats.commits(admin, database)
        server_cpu = stats.cpu_seconds(stats.server_pids(postmaster)) - server_cpu
        fleet_cpu = stats.cpu_seconds(fleet.pids) - fleet_cpu
        found = stats.statements(admin, database)
    record["failures"] = fleet.errors
    app.close()
    calls = sum(s["calls"] for s in found)
    record |= {
        "lowest_running": lowest,
        "load_average": _load(load),
        "statements_per_s": calls / elapsed,
        "commits_per_s": (after - before - polls - 1) / elapsed,
        "server_cpu_cores": server_cpu / elapsed,
        "workers_cpu_cores": fleet_cpu / elapsed,
        "by_statement": [s | {"per_s": s["calls"] / elapsed} for s in found[:12]],
    }
    _drop(cluster.url, database)
    return record


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    """Median figures per fleet and the large fleet's rate over the small one's."""
    sizes = results["sizes"]
    out: dict[str, Any] = {}
    for workers in (sizes["baseline"], sizes["workers"]):
        runs = [r for r in results["processing"] if r["workers"] == workers and "rate" in r]
        if not runs:
            continue
        out[str(workers)] = {
            key: _median([_dig(r, key) for r in runs])
            for key in (
                "rate",
                "commits_per_s",
                "server_cpu_us_per_job",
                "workers_cpu_us_per_job",
                "connections_per_worker",
                "claim.mean_ms",
                "claim.max_ms",
                "claim.jobs_per_claim",
                "claim_sampled.p50",
                "claim_sampled.p99",
                "claim_sampled.n",
            )
        } | {"rates": [r["rate"] for r in runs], "loads": [r.get("load_average") for r in runs]}
    pairs = []
    for number in sorted({r["round"] for r in results["processing"]}):
        rate = {r["workers"]: r["rate"] for r in results["processing"]
                if r["round"] == number and "rate" in r}  # fmt: skip
        if sizes["baseline"] in rate and sizes["workers"] in rate:
            pairs.append(
                {"round": number, "ratio": rate[sizes["workers"]] / rate[sizes["baseline"]]}
            )
    if pairs:
        out["pairs"] = pairs
        out["ratio"] = _median([p["ratio"] for p in pairs])
    return out


def markdown(results: dict[str, Any]) -> str:
    """The figures as the table BENCHMARKS.md shows."""
    sizes, summary = results["sizes"], results["summary"]
    lines = [
        "| fleet | jobs/s (median; each round) | commits/s | connections per worker "
        "| jobs per claim | claim mean / max (ms, all calls) "
        "| claim p50 / p99 (ms, sampled) | CPU per job, server / workers (µs) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for workers in (sizes["baseline"], sizes["workers"]):
        s = summary.get(str(workers))
        if not s:
            continue
        rounds = ", ".join(
            f"{r:,.0f}" + (f" at load {load[0]:g}-{load[1]:g}" if load else "")
            for r, load in zip(s["rates"], s.get("loads", [None] * len(s["rates"])), strict=True)
        )
        lines.append(
            f"| {workers} x {sizes['concurrency']} | {s['rate']:,.0f} ({rounds}) "
            f"| {s['commits_per_s']:,.0f} | {s['connections_per_worker']:.2f} "
            f"| {s['claim.jobs_per_claim']:.1f} "
            f"| {s['claim.mean_ms']:.2f} / {s['claim.max_ms']:.0f} "
            f"| {s['claim_sampled.p50']:.2f} / {s['claim_sampled.p99']:.2f} "
            f"(n = {s['claim_sampled.n']:,.0f}) "
            f"| {s['server_cpu_us_per_job']:.0f} / {s['workers_cpu_us_per_job']:.0f} |"
        )
    if "ratio" in summary:
        each = ", ".join(f"round {p['round']} {p['ratio']:.2f}" for p in summary["pairs"])
        lines.append(
            f"\n{sizes['workers']} workers / {sizes['baseline']}, round by round (the two "
            f"fleets of a round run back to back): {each}; median **{summary['ratio']:.2f}** "
            "(goal 0.9)"
        )
    h = results.get("held")
    if h and "statements_per_s" in h:
        lines += [
            "",
            f"{h['slots']:,} running jobs of {h['hold_s']:g} s ({h['workers']} workers), "
            f"over {h['window_s']:g} s (at least {h['lowest_running']:,} running): "
            f"{h['statements_per_s']:,.1f} statements/s, {h['commits_per_s']:,.1f} commits/s, "
            f"server CPU {h['server_cpu_cores']:.2f} cores, workers' CPU "
            f"{h['workers_cpu_cores']:.2f} cores.",
            "",
            "| statement | calls/s | mean (ms) | rows per call |",
            "| --- | --- | --- | --- |",
        ]
        for s in h["by_statement"]:
            rows = s["rows"] / s["calls"] if s["calls"] else 0
            lines.append(
                f"| `{s['kind']}` | {s['per_s']:,.2f} | {s['mean_ms']:.2f} | {rows:,.1f} |"
            )
    return "\n".join(lines)


@contextmanager
def _fleet(url: str, scratch: Path, workers: int, sizes: Sizes) -> Iterator[WorkerProcesses]:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(scratch), str(ROOT)]), PGAPPNAME=WORKER_APP
    )
    command = [
        sys.executable,
        "-m",
        "heartq",
        "worker",
        "fleet_tasks:app",
        "--url",
        url,
        "--concurrency",
        str(sizes.concurrency),
        "--shutdown-timeout",
        "0",
    ]
    if sizes.heartbeat_interval:
        command += ["--heartbeat-interval", str(sizes.heartbeat_interval)]
    if sizes.prefetch:
        command += ["--prefetch", str(sizes.prefetch)]
    logs = [scratch / f"{url.rsplit('/', 1)[1]}-w{i}.log" for i in range(workers)]
    fleet = WorkerProcesses(command, env, logs)
    try:
        yield fleet
    finally:
        fleet.stop()


class _Peak:
    """The most connections the workers held to `database` at once, sampled every 0.1 s."""

    def __init__(self, server: str, database: str) -> None:
        self.value = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, args=(server, database))
        self._thread.start()

    def _sample(self, server: str, database: str) -> None:
        with psycopg.connect(server, autocommit=True) as conn:
            while not self._stop.is_set():
                row = conn.execute(
                    f"{M} SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                    "AND application_name = %s",
                    (database, WORKER_APP),
                ).fetchone()
                self.value = max(self.value, int(row[0]) if row else 0)
                self._stop.wait(0.1)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class _CpuPerJob:
    """CPU the server's processes and the workers spend from now on, per job: on a
    machine whose cores the fleet fills, what a fleet's rate is the inverse of. A
    backend that starts meanwhile counts whole (it was not there to be read before)."""

    def __init__(self, postmaster: int, workers: list[int]) -> None:
        self._postmaster, self._workers = postmaster, workers
        self._server = {pid: stats.cpu_seconds([pid]) for pid in stats.server_pids(postmaster)}
        self._fleet = stats.cpu_seconds(workers)

    def per_job(self, jobs: int) -> tuple[float, float]:
        """(server, workers) CPU microseconds per job since this was made."""
        server = sum(
            stats.cpu_seconds([pid]) - self._server.get(pid, 0.0)
            for pid in stats.server_pids(self._postmaster)
        )
        fleet = stats.cpu_seconds(self._workers) - self._fleet
        return server / jobs * 1e6, fleet / jobs * 1e6


def _active(conn: psycopg.Connection[Any]) -> int:
    return _count(conn, f"{M} SELECT count(*) FROM heartq.workers WHERE status = 'active'")


def _running(conn: psycopg.Connection[Any]) -> int:
    return _count(conn, f"{M} SELECT count(*) FROM heartq.jobs WHERE status = 'running'")


def _count(conn: psycopg.Connection[Any], query: str) -> int:
    row = conn.execute(query).fetchone()
    return int(row[0]) if row else 0


def _until(
    condition: Callable[[], bool], seconds: float, what: str, fleet: WorkerProcesses
) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline or fleet.failed():
            raise RuntimeError(f"fleet: not reached within {seconds:g} s: {what}")
        time.sleep(0.2)


def _database(server: str, name: str) -> str:
    _drop(server, name)
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return f"{server.rsplit('/', 1)[0]}/{name}"


def _drop(server: str, name: str) -> None:
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _wait_for(url: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            psycopg.connect(url, connect_timeout=2).close()
            return
        except psycopg.Error:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _load(before: float) -> list[float]:
    """The machine's 1-minute load average before and after a measurement: on a shared
    machine, what says how far its absolute figures can be trusted."""
    return [round(before, 1), round(os.getloadavg()[0], 1)]


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _dig(record: dict[str, Any], key: str) -> float:
    value: Any = record
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return float(value) if value is not None else float("nan")


def _say(record: dict[str, Any]) -> None:
    if record["part"] == "held":
        print(
            f"fleet: {record['slots']} running jobs: {record['statements_per_s']:,.1f} "
            f"statements/s, {record['commits_per_s']:,.1f} commits/s, server CPU "
            f"{record['server_cpu_cores']:.2f} cores",
            flush=True,
        )
        return
    claim = record["claim_sampled"]
    print(
        f"fleet: round {record['round']}, {record['workers']} x {record['concurrency']}: "
        f"{record['rate']:,.0f} jobs/s, {record['commits_per_s']:,.0f} commits/s, "
        f"{record['connections_per_worker']:.2f} connections per worker, CPU per job "
        f"{record['server_cpu_us_per_job']:.0f} µs server, "
        f"{record['workers_cpu_us_per_job']:.0f} µs workers, claim p99 "
        f"{claim.get('p99', float('nan')):.2f} ms (n = {claim['n']})",
        flush=True,
    )


def write(results: dict[str, Any], out: Path, chart: Path, peers: Path) -> None:
    """`out/fleet.json` and the chart (drawn with the peers' matplotlib)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "fleet.json").write_text(json.dumps(results, indent=1))
    chart.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [str(peers), str(ROOT / "bench" / "fleet_chart.py"), str(out / "fleet.json"), str(chart)],
        check=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: the code path")
    parser.add_argument("--workers", type=int)
    parser.add_argument("--baseline", type=int)
    parser.add_argument("--concurrency", type=int)
    parser.add_argument("--jobs", type=int)
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--hold", type=float)
    parser.add_argument("--window", type=float)
    parser.add_argument("--sample-rate", type=float)
    parser.add_argument("--prefetch", type=int, help="each worker's --prefetch (default 0)")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "heartq-fleet")
    parser.add_argument("--venv", type=Path, default=ROOT / ".bench-venv")
    args = parser.parse_args()
    given = {k: v for k, v in vars(args).items() if k in Sizes.__dataclass_fields__ and v}
    sizes = Sizes(**(asdict(QUICK if args.quick else FULL) | given))
    from bench import environment

    results = run(sizes)
    write(results, args.out, args.out / "fleet.png", environment.peers_python(args.venv))
    print(markdown(results))
    for failure in results["failures"]:
        print(f"FAILED: {failure}")
    return 1 if results["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
