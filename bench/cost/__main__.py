"""`python -m bench.cost`: what a job costs heartq and pgqueuer, counted on a private cluster.

For each contender, two rounds of N and 2N no-op jobs (each in a fresh database on a
private PostgreSQL cluster, `bench.cost.cluster`), each round an enqueue phase (calls of
`--batch` jobs) and a work phase (2 worker processes until the queue is empty). Per
phase it counts:

- statements (pg_stat_statements, top level), buffers hit and dirtied (the same);
- round trips and bytes each way (every contender connection goes through a counting
  TCP relay, `bench.cost.relay`);
- WAL bytes and records, by record type and relation, B-tree entries and heap LOCK
  records (`pg_waldump` between the phase's two LSNs, `bench.cost.waldump`);
- rows inserted, updated, deleted and updated heap-only (pg_stat_user_tables);
- the server's instructions (the cluster runs under `valgrind --tool=callgrind`; every
  client backend's instructions in `PostgresMain`), unless `--no-callgrind`.

A figure per job is (2N's - N's) / N: what a phase pays once cancels out. Under callgrind
the server is some 50 times slower than the workers, so both contenders' claims and
finishes run at their full batch sizes ("equal batches"). Then the cluster restarts
natively and `bench.cpu_per_job` measures the workers' side (N/5 and N jobs) for each
pool. valgrind is installed from Debian's packages when missing (as root).

    .venv/bin/python -m bench.cost                # 20,000 and 40,000 jobs: about an hour
    .venv/bin/python -m bench.cost --quick        # 2,000 and 4,000: a few minutes
    .venv/bin/python -m bench.cost --jobs 5000 --no-callgrind --cpu ''

Prints the table (docs/BENCHMARKS.md shows it) and writes the figures, with the details
behind them (statements, tables, WAL by type and relation, both rounds), to `--out`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import cpu_per_job, environment
from bench.cost import report
from bench.cost.cluster import CostCluster
from bench.cost.relay import CountingRelay
from bench.cost.rounds import CONTENDERS, LINEUP, ROOT, Contender, Rounds


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.cost", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--jobs", type=int, help="N: rounds of N and 2N jobs (default 20,000)")
    parser.add_argument("--quick", action="store_true", help="N = 2,000")
    parser.add_argument(
        "--batch", type=int, default=100, help="jobs per enqueue call (1: one at a time)"
    )
    parser.add_argument("--count", default="heartq-thread,pgqueuer",
                        help=f"contenders counted, of {','.join(LINEUP)}")  # fmt: skip
    parser.add_argument(
        "--cpu",
        default="heartq-thread,heartq-async,pgqueuer",
        help="contenders whose workers' CPU a job is measured ('' for none)",
    )
    parser.add_argument("--no-callgrind", action="store_true", help="count without instructions")
    parser.add_argument(
        "--venv", type=Path, default=ROOT / ".bench-venv", help="the peers' environment"
    )
    parser.add_argument("--out", type=Path, help="the JSON file (default docs/bench/cost.json; "
                        "/tmp/heartq-cost-quick.json with --quick)")  # fmt: skip
    args = parser.parse_args()
    jobs = args.jobs or (2_000 if args.quick else 20_000)
    out = args.out or (Path("/tmp/heartq-cost-quick.json") if args.quick
                       else ROOT / "docs" / "bench" / "cost.json")  # fmt: skip
    counted = [LINEUP[n] for n in filter(None, args.count.split(","))]
    timed = [LINEUP[n] for n in filter(None, args.cpu.split(","))]
    python = {False: Path(sys.executable)}
    if any(c.peer for c in counted + timed):
        python[True] = environment.peers_python(args.venv)
    results: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "command": "python -m bench.cost " + shlex.join(sys.argv[1:]),
        "jobs": [jobs, 2 * jobs],
        "batch": args.batch,
        "callgrind": not args.no_callgrind,
        "enqueue_title": "enqueue, one at a time"
        if args.batch == 1
        else f"enqueue, batches of {args.batch}",
        "labels": {c.name: c.label for c in counted + timed},
        "peers": environment.PEERS,
    }
    cluster = CostCluster()
    relay = CountingRelay(cluster.port)
    try:
        results["postgresql"] = cluster.server_version()
        if not args.no_callgrind:
            cluster.with_callgrind(cluster.root / "callgrind")
        rounds = Rounds(cluster, relay, python, args.batch)
        raw: dict[str, dict[str, Any]] = {c.name: {} for c in counted}
        for size in (jobs, 2 * jobs):
            for contender in counted:
                print(f"cost: {contender.label}, {size:,} jobs", flush=True)
                raw[contender.name][str(size)] = rounds.run(contender, size)
        results["raw"] = raw
        results["per_job"] = {
            name: {phase: report.per_job(by_size[str(jobs)][phase], by_size[str(2 * jobs)][phase])
                   for phase in ("enqueue", "work")}
            for name, by_size in raw.items()
        }  # fmt: skip
        if timed and not args.no_callgrind:
            cluster.with_callgrind(None)
        results["cpu"] = {c.name: _cpu(c, cluster, python, jobs) for c in timed}
    finally:
        relay.close()
        cluster.close()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1, default=str))
    print(report.markdown(results))
    print(f"cost: wrote {out}")
    return 0


def _cpu(
    contender: Contender, cluster: CostCluster, python: dict[bool, Path], jobs: int
) -> dict[str, Any]:
    """bench.cpu_per_job on the contender's side script, N/5 and N jobs, this cluster's
    processes counted as the server."""
    print(f"cost: {contender.label}, CPU a job", flush=True)
    with tempfile.TemporaryDirectory(prefix="heartq-cost-cpu-") as scratch:
        command = [
            str(python[contender.peer]), str(CONTENDERS / contender.side),
            "--server", cluster.url_for("postgres"), "--dir", f"{scratch}/run", "--single", "0",
            *contender.side_options,
        ]  # fmt: skip
        return cpu_per_job.measure(
            command, contender.match, jobs // 5, jobs, cluster.postmaster_pid()
        )


if __name__ == "__main__":
    sys.exit(main())
