"""`python -m bench`: heartq side by side with its Python peers, in one run.

Contenders (each in a fresh store, round by round in rotating order): heartq on
PostgreSQL and SQLite, pgqueuer and procrastinate on PostgreSQL, SqliteHuey, and RQ on
Redis for reference; with them, in the same rounds, the raw limits (pgbench, SQLite
commits) and heartq's bare-statement ceiling (`bench/limits.py`). The peers are installed
into `.bench-venv` at the versions pinned in `bench/environment.py`.

Writes `<out>/results.json` and `<out>/throughput.png`; a full run into docs/bench also
rewrites the results section of docs/BENCHMARKS.md. `--quick`: one round of tiny counts
(under 3 minutes; what the test runs so the harness keeps working).

The `fleet` section (`bench/fleet.py`: 40 worker processes x 25 slots against 4 x 25 on a
private cluster, then 1,000 running jobs) runs only when `--only` names it, alone or with
contenders; it writes `<out>/fleet.json` and its chart (`docs/images/fleet.png` for a
full run into docs/, else `<out>/fleet.png`).

    .venv/bin/python -m bench                 # 3 rounds of 20,000 jobs, into docs/
    .venv/bin/python -m bench --quick --out /tmp/q
    .venv/bin/python -m bench --only fleet    # the fleet section alone
    .venv/bin/python -m bench --only heartq --before /tmp/base --out /tmp/ab
                                              # a change against its base, same rounds

`--before CHECKOUT` repeats every heartq run from CHECKOUT's src/ (say a `git worktree`
of the base commit) right after the installed heartq's, and reports it as a contender of
its own, "heartq (before)", whose ratio reads now / before; such a run never rewrites
docs/BENCHMARKS.md.

What it needs is `INSTALL` (`--help` prints it): this process imports heartq, its
postgres extra and the standard library, never the tests (whose harness needs the dev
extra); private servers come from `bench/servers/`.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import environment, fleet, fleet_setup, report, runs, services

ROOT = Path(__file__).resolve().parent.parent
DOCS_OUT = ROOT / "docs" / "bench"
INSTALL = (
    "What to install: run from the repository's root with heartq and its postgres extra "
    "(pip install -e '.[postgres]'; the dev extra is not needed). The peers ("
    + ", ".join(pin.split("==")[0] for pin in environment.PEERS)
    + ") are not installed there: the first run makes --venv (.bench-venv) and installs "
    "them at the versions pinned in bench/environment.py (docs/BENCHMARKS.md). Also: a "
    "PostgreSQL server at --server with pgbench (Debian's postgresql-client); for RQ, Redis "
    "at --redis or a redis-server binary; for the fleet section, initdb and pg_ctl "
    "(Debian's postgresql, or pip install pgserver)."
)


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__.splitlines()[0], epilog=INSTALL
    )
    parser.add_argument("--quick", action="store_true", help="one round of tiny counts")
    parser.add_argument("--rounds", type=int, help="rounds (default 3; 1 with --quick)")
    parser.add_argument("--jobs", type=int, help="jobs per run (default 20,000)")
    parser.add_argument(
        "--only", help="comma-separated contenders (heartq,pgqueuer,...) and sections (fleet)"
    )
    parser.add_argument(
        "--server",
        default="postgresql://postgres@127.0.0.1:5432/test",
        help="PostgreSQL URL of a database where others may be created",
    )
    parser.add_argument(
        "--redis",
        default="redis://127.0.0.1:6379/9",
        help="Redis for RQ (a private redis-server if none answers)",
    )
    parser.add_argument(
        "--venv", type=Path, default=ROOT / ".bench-venv", help="the peers' environment"
    )
    parser.add_argument("--out", type=Path, default=DOCS_OUT, help="where results go")
    parser.add_argument(
        "--before",
        type=Path,
        help="a checkout of an earlier heartq: each heartq run is repeated from its src/ "
        "in the same rounds (a change timed against its base)",
    )
    args = parser.parse_args()

    sizes = runs.QUICK if args.quick else runs.FULL
    if args.jobs:
        sizes = runs.Sizes(args.jobs, min(sizes.single, args.jobs // 2),
                           sizes.limit_seconds, args.jobs)  # fmt: skip
    rounds = args.rounds or (1 if args.quick else 3)
    only = args.only.split(",") if args.only else []
    lineup = [c for c in runs.LINEUP if not only or c.name in only]
    if args.before:
        if not (args.before / "src" / "heartq").is_dir():
            parser.error(f"--before {args.before}: no src/heartq there (a heartq checkout?)")
        lineup = runs.with_before(lineup, args.before.resolve())
    peers = environment.peers_python(args.venv)
    args.out.mkdir(parents=True, exist_ok=True)
    if "fleet" in only:
        failed = _fleet(args.quick, args.rounds, args.out, peers)
        if not lineup:
            return 1 if failed else 0
    results: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "command": "python -m bench " + shlex.join(sys.argv[1:]),
        "machine": environment.machine(args.server),
        "sizes": sizes.__dict__,
        "rounds": rounds,
        "peers": environment.PEERS,
    }
    recorded = []
    with services.redis(args.redis) as redis, tempfile.TemporaryDirectory() as scratch:
        for number in range(rounds):
            order = lineup[number % len(lineup) :] + lineup[: number % len(lineup)]
            one: dict[str, Any] = {"round": number + 1, "contenders": []}
            for contender in order:
                python = runs.interpreter(contender, peers)
                record = runs.run_contender(contender, sizes, python, args.server, redis)
                _say(number, record)
                one["contenders"].append(record)
            one["limits"] = runs.run_limits(sizes, args.server, Path(scratch))
            for record in one["limits"]:
                _say(number, record)
            recorded.append(one)
    results["raw"] = recorded
    results["summary"] = report.summarize(recorded)
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    chart = args.out / "throughput.png"
    subprocess.run([str(peers), str(ROOT / "bench" / "chart.py"),
                    str(args.out / "results.json"), str(chart)], check=True)  # fmt: skip
    if args.out.resolve() == DOCS_OUT and not args.quick and not args.before:
        report.write_section(ROOT / "docs" / "BENCHMARKS.md", report.markdown(results))
    print(report.markdown(results))
    print(f"bench: wrote {args.out / 'results.json'} and {chart}")
    return 1 if results["summary"]["failures"] else 0


def _fleet(quick: bool, rounds: int | None, out: Path, peers: Path) -> bool:
    """The fleet section (`--rounds`: its rounds, 2 by default): figures, chart and
    table; True if a check failed."""
    sizes = fleet_setup.QUICK if quick else fleet_setup.FULL
    results = fleet.run(dataclasses.replace(sizes, rounds=rounds) if rounds else sizes)
    docs = out.resolve() == DOCS_OUT and not quick
    chart = ROOT / "docs" / "images" / "fleet.png" if docs else out / "fleet.png"
    fleet.write(results, out, chart, peers)
    print(fleet.markdown(results))
    for failure in results["failures"]:
        print(f"fleet FAILED: {failure}")
    print(f"bench: wrote {out / 'fleet.json'} and {chart}", flush=True)
    return bool(results["failures"])


def _say(number: int, record: dict[str, Any]) -> None:
    if "error" in record:
        figure = f"FAILED: {record['error']}"
    elif "process" in record:
        figure = f"process {record['process']:,.0f} jobs/s, enqueue {record['enqueue_single']:,.0f} / {record['enqueue_batch']:,.0f}"  # noqa: E501
    else:
        figure = f"{record['value']:,.0f} {record['unit']}"
    print(f"round {number + 1}: {record['label']} ({record['backend']}): {figure}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
