"""`python -m bench.cost`: what a job costs heartq and pgqueuer, counted on a private cluster.

For each contender, two rounds of N and 2N no-op jobs (each in a fresh database on a
private PostgreSQL cluster, `bench.cost.cluster`), each round an enqueue phase (calls of
`--batch` jobs) and a work phase (2 worker processes until the queue is empty). Per
phase it counts:

- statements (pg_stat_statements, top level), the times they were planned (`plans`: a
  statement is planned at each run until psycopg prepares it on its connection), buffers
  hit and dirtied (the same);
- round trips and bytes each way (every contender connection goes through a counting
  TCP relay, `bench.cost.relay`);
- WAL bytes and records, by record type and relation, B-tree entries and heap LOCK
  records (`pg_waldump` between the phase's two LSNs, `bench.cost.waldump`);
- rows inserted, updated, deleted and updated heap-only (pg_stat_user_tables).

A figure per job is (2N's - N's) / N: what a phase pays once cancels out. Then, with the
cluster as it runs, `bench.cpu_per_job` measures the workers' side (N/5 and N jobs) for
each pool, this cluster's processes counted as the server. Last, the cluster restarts
under `valgrind --tool=callgrind` (installed from Debian's packages when missing) and
the rounds run again (`--callgrind-jobs` N) for the server's instructions: every client
backend's, in `PostgresMain`. There the server is some 50 times slower against the
workers, so both contenders claim and finish in full batches, and what either does on a
timer (heartq's liveness probe, pgqueuer's heartbeat and log aggregation) weighs more:
the table takes only the instructions from those rounds, every other count from the
native ones (the JSON keeps both).

Between the native rounds and the CPU, the storage (`bench.cost.storage`, unless
`--no-storage`): per contender of `--count`, what its schema grew a finished job after
a burst of N jobs drained and after a steady flow (`--flow-jobs` at `--flow-rate` a
second), each as the drain left it and after a plain VACUUM, with each table's free
space (`pgstattuple`). `--storage-only` measures that alone.

    .venv/bin/python -m bench.cost --quick        # N = 2,000: 10-15 minutes
    .venv/bin/python -m bench.cost                # N = 20,000
    .venv/bin/python -m bench.cost --jobs 5000 --no-callgrind --cpu ''
    .venv/bin/python -m bench.cost --storage-only --quick   # the storage alone: 2 minutes
    .venv/bin/python -m bench.cost --quick --no-storage --cpu '' --count heartq-thread \
        --keep-callgrind /tmp/cg    # then callgrind_annotate --inclusive=yes each file

Prints the table (docs/BENCHMARKS.md shows it) and writes the figures, with the details
behind them (statements, tables, WAL by type and relation, every round), to `--out`.
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
from bench.cost import report, storage
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
    parser.add_argument("--no-storage", action="store_true", help="no burst and flow for storage")
    parser.add_argument("--storage-only", action="store_true",
                        help="only the storage's burst and flow (no rounds, CPU, callgrind)")
    parser.add_argument("--flow-jobs", type=int,
                        help="jobs of the storage's steady flow (default: N, at most 10,000)")
    parser.add_argument("--flow-rate", type=float, default=200.0,
                        help="jobs a second of the storage's steady flow")  # fmt: skip
    parser.add_argument("--keep-callgrind", type=Path, metavar="DIR",
                        help="keep each phase's callgrind files in DIR/<contender>-<N>-<phase> "
                        "(callgrind_annotate says where the instructions went)")
    parser.add_argument("--callgrind-jobs", type=int,
                        help="N of the rounds under callgrind (default: --jobs)")  # fmt: skip
    parser.add_argument(
        "--venv", type=Path, default=ROOT / ".bench-venv", help="the peers' environment"
    )
    parser.add_argument("--out", type=Path, help="the JSON file (default docs/bench/cost.json; "
                        "/tmp/heartq-cost-quick.json with --quick, /tmp/heartq-cost-storage.json "
                        "with --storage-only)")  # fmt: skip
    args = parser.parse_args()
    jobs = args.jobs or (2_000 if args.quick else 20_000)
    if args.storage_only and args.no_storage:
        parser.error("--storage-only and --no-storage: nothing to do")
    out = args.out or (Path("/tmp/heartq-cost-storage.json") if args.storage_only
                       else Path("/tmp/heartq-cost-quick.json") if args.quick
                       else ROOT / "docs" / "bench" / "cost.json")  # fmt: skip
    counted = [LINEUP[n] for n in filter(None, args.count.split(","))]
    timed = [] if args.storage_only else [LINEUP[n] for n in filter(None, args.cpu.split(","))]
    flow_jobs = args.flow_jobs or min(jobs, 10_000)
    python = {False: Path(sys.executable)}
    if any(c.peer for c in counted + timed):
        python[True] = environment.peers_python(args.venv)
    results: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "command": "python -m bench.cost " + shlex.join(sys.argv[1:]),
        "jobs": [jobs, 2 * jobs],
        "batch": args.batch,
        "callgrind": not args.no_callgrind and not args.storage_only,
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
        rounds = Rounds(cluster, relay, python, args.batch, args.keep_callgrind)
        if not args.storage_only:
            results["raw"], results["per_job"] = rounds.both_sizes(counted, jobs)
        if not args.no_storage:
            rate = args.flow_rate
            results["storage_jobs"] = {"burst": jobs, "flow": flow_jobs, "flow_rate": rate}
            results["storage"] = storage.measure(rounds, counted, jobs, flow_jobs, rate)
        results["cpu"] = {c.name: _cpu(c, cluster, python, jobs) for c in timed}
        if results["callgrind"]:
            cluster.with_callgrind(cluster.root / "callgrind")
            under = args.callgrind_jobs or jobs
            results["callgrind_jobs"] = [under, 2 * under]
            results["raw_under_callgrind"], results["per_job_under_callgrind"] = rounds.both_sizes(
                counted, under
            )
            for name, phases in results["per_job"].items():
                for phase, figures in phases.items():
                    theirs = results["per_job_under_callgrind"][name][phase]
                    figures["server_instructions"] = theirs["server_instructions"]
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
