"""A thousand slots on one PostgreSQL: 40 worker processes x 25 against 4 x 25.

The `fleet` section of `python -m bench` (`--only fleet`), or on its own:

    .venv/bin/python -m bench.fleet                       # 40 x 25 vs 4 x 25, 20,000 jobs
    .venv/bin/python -m bench.fleet --quick --out /tmp/f  # tiny sizes: the code path

Everything runs on a private cluster of its own (initdb in a temporary directory, fsync
on, `max_connections` sized as docs/OPERATIONS.md says: 3 per worker plus 10 for the
bench's own sessions, `pg_stat_statements` preloaded), never on the machine's shared
server. Three parts:

- **Processing.** For each fleet (the small one, then the large one, `--rounds` times
  in alternating order), a fresh database: the workers start against an empty queue and,
  once every one is registered, `--jobs` no-op jobs are enqueued in one call. The rate is
  jobs / (last `finished_at` - first `started_at`), both the server's clock, so worker
  start-up is not counted. Every job must succeed once (one execution, one attempt) and no
  worker may log an error. With it: the claim's calls, jobs per claim, mean and max
  (`pg_stat_statements`), its p50/p99 from the server's sampled duration log
  (`bench/fleet_stats.py` says how), the peak of the database's connections (and per
  worker), and commits/s (`pg_stat_database.xact_commit`) over the run.
- **Sleeping** and **held**: the large fleet with jobs that wait on I/O
  (`bench/fleet_io.py`): how close to slots / sleep it drains them, and what a thousand
  running jobs cost.
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
from dataclasses import asdict
from pathlib import Path
from typing import Any

import psycopg

from bench import fleet_io
from bench import fleet_setup as setup
from bench import fleet_stats as stats
from bench.fleet_setup import CHECK, DONE, FULL, QUICK, ROOT, WORKER_APP, M, Sizes
from bench.servers.postgres import PrivateCluster
from bench.worker_processes import TASKS
from heartq.app import App


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
        setup.wait_for(cluster.url)
        with psycopg.connect(cluster.url, autocommit=True) as admin:
            admin.execute("CREATE EXTENSION pg_stat_statements")
        with tempfile.TemporaryDirectory(prefix="heartq-fleet-") as tmp:
            scratch = Path(tmp)
            (scratch / "fleet_tasks.py").write_text(TASKS)
            fleets = [sizes.baseline, sizes.workers]
            parts = sizes.parts.split(",")
            for number in range(sizes.rounds if "processing" in parts else 0):
                for workers in fleets if number % 2 == 0 else fleets[::-1]:
                    record = processing(cluster, scratch, workers, sizes, number + 1)
                    _say(record)
                    results["processing"].append(record)
                    results["failures"] += record["failures"]
            for name, part in (("sleeping", fleet_io.sleeping), ("held", fleet_io.held)):
                if name in parts:
                    record = part(cluster, scratch, sizes)
                    _say(record)
                    results[name] = record
                    results["failures"] += record["failures"]
    finally:
        cluster.close()
    results["summary"] = summarize(results)
    return results


def processing(
    cluster: PrivateCluster, scratch: Path, workers: int, sizes: Sizes, number: int
) -> dict[str, Any]:
    """One fleet through `sizes.jobs` no-op jobs in a fresh database."""
    database = f"fleet_{workers}_{number}"
    url = setup.database(cluster.url, database)
    record: dict[str, Any] = {
        "part": "processing",
        "round": number,
        "workers": workers,
        "concurrency": sizes.concurrency,
        "jobs": sizes.jobs,
    }
    app = App(url)
    app.migrate()
    with setup.registered(cluster.url, url, scratch, workers, sizes) as session:
        admin, watch, fleet = session.admin, session.watch, session.workers
        stats.reset_statements(admin)
        load = os.getloadavg()[0]
        peak = _Peak(cluster.url, database)
        before, polls = stats.commits(admin, database), 0
        postmaster = cluster.postmaster_pid()
        cpu = _CpuPerJob(postmaster, fleet.pids)
        started = time.monotonic()
        app.enqueue_many("noop", [{}] * sizes.jobs)
        while setup.count(watch, DONE) < sizes.jobs:
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
        "load_average": setup.load(load),
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
    setup.drop(cluster.url, database)
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
    z = results.get("sleeping")
    if z and "rate" in z:
        lines += ["", fleet_io.sleeping_line(z)]
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
    if record["part"] == "sleeping":
        print(f"fleet: {fleet_io.sleeping_line(record)}", flush=True)
        return
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
    parser.add_argument("--sleep", type=float, help="seconds each sleeping job waits (1)")
    parser.add_argument("--sleeping-jobs", type=int, help="jobs the sleeping part drains")
    parser.add_argument("--parts", help="comma-separated: processing,sleeping,held (all)")
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
