"""Workers' rate with a long queue against a short one (100,000 vs 1,000,000), as a user
meets it: the backlog enqueued through the public API, workers started after it exists
(a deploy), before and after the table was analyzed as autovacuum analyzes it.

For each backend and backlog: a fresh store filled with N no-op jobs by
`App.enqueue_many`, 5,000 a call (topped up to N before each measurement); then, as
filled, one worker (thread pool x 50) and then
`--workers` of them are started and their first `--count` completions timed, from the
first handler entry (stamped as in `python -m bench`) until `--count` jobs are committed
succeeded (polled every 0.2 s), then stopped with SIGTERM; then `ANALYZE` (what
autovacuum runs on a table that grew by a tenth: no VACUUM) and the same two again.
Each cell is measured `--rounds` times (fresh workers each time, the queue topped up
before each) and its median kept; each median is printed with its ratio to the first
backlog's in the same state and fleet; never asserted here
(tests/integration/test_backlog_statistics.py asserts the analyzed backlog's rate on
PostgreSQL):

    .venv/bin/python -m bench.backlog --backlogs 100000 1000000 --count 20000 --workers 4 \
        --rounds 3
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

from bench.contenders.common import Stamps
from heartq.app import App

TASKS = """
import os
import heartq
from bench.contenders.common import Stamps

app = heartq.App()
stamps = Stamps(os.environ["HEARTQ_BENCH_DIR"])

@app.task
def noop() -> None:
    stamps.entered()
"""
ROOT = Path(__file__).resolve().parent.parent
BATCH = 5000


@dataclass(frozen=True)
class Cell:
    """One measurement: a backend, a backlog, analyzed or not, a fleet's size."""

    backend: str
    backlog: int
    analyzed: bool
    workers: int

    @property
    def row(self) -> tuple[str, bool, int]:
        """What the ratio compares across backlogs."""
        return self.backend, self.analyzed, self.workers


def fill(url: str, queued: int) -> None:
    """No-op jobs enqueued as an application would (`enqueue_many`, 5,000 a call) until
    `queued` are queued."""
    app = App(url)
    try:
        app.migrate()
        jobs = queued - _count(url, "status = 'queued'")
        for offset in range(0, jobs, BATCH):
            app.enqueue_many("noop", [{}] * min(BATCH, jobs - offset))
    finally:
        app.close()


def drain(url: str, count: int, workers: int, scratch: Path) -> float:
    """Jobs/s of `workers` fresh worker processes over their first `count` jobs."""
    stamps = scratch / f"stamps-{time.monotonic_ns()}"
    stamps.mkdir()
    (scratch / "backlog_tasks.py").write_text(TASKS)
    env = dict(os.environ, HEARTQ_BENCH_DIR=str(stamps),
               PYTHONPATH=os.pathsep.join([str(scratch), str(ROOT)]))  # fmt: skip
    argv = [sys.executable, "-m", "heartq", "worker", "backlog_tasks:app", "--url", url,
            "--concurrency", "50"]  # fmt: skip
    start = _count(url, SUCCEEDED)
    log = scratch / "workers.log"
    with log.open("ab") as output:
        fleet = [subprocess.Popen(argv, env=env, stderr=output) for _ in range(workers)]
    try:
        deadline = time.monotonic() + 600
        while _count(url, SUCCEEDED) < start + count:
            if time.monotonic() > deadline or any(w.poll() is not None for w in fleet):
                tail = "".join(log.read_text().splitlines(keepends=True)[-20:])
                raise RuntimeError(f"the workers did not get through the jobs:\n{tail}")
            time.sleep(0.2)
        done_at = time.time()
    finally:
        for worker in fleet:
            worker.send_signal(signal.SIGTERM)
        for worker in fleet:
            worker.wait(60)
    return count / (done_at - Stamps(str(stamps)).first_entry())


def analyze(url: str) -> None:
    """ANALYZE the store's tables, as autovacuum does once a tenth of a table changed."""
    if url.startswith("sqlite"):
        conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        try:
            conn.execute("ANALYZE")
        finally:
            conn.close()
        return
    base, schema = url.split("?schema=")
    with psycopg.connect(base, autocommit=True) as pg:
        pg.execute(f"ANALYZE {schema}.job_documents")  # type: ignore[arg-type]


SUCCEEDED = "status = 'succeeded' AND finished_at IS NOT NULL"
"""Jobs committed succeeded (through the finished index: cheap at any backlog)."""


def _count(url: str, where: str) -> int:
    """How many of the store's jobs match `where` (a constant condition)."""
    if url.startswith("sqlite"):
        if not Path(url.removeprefix("sqlite:///")).exists():
            return 0
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            row = conn.execute(f"SELECT count(*) FROM heartq_jobs WHERE {where}").fetchone()
    else:
        base, schema = url.split("?schema=")
        with psycopg.connect(base) as pg:
            statement = f"SELECT count(*) FROM {schema}.jobs WHERE {where}"
            row = pg.execute(statement).fetchone()  # type: ignore[arg-type]
    return int(row[0]) if row else 0


def run_backlog(backend: str, backlog: int, args: argparse.Namespace) -> dict[Cell, float]:
    """Every cell of one backend and backlog, in a fresh store (a temporary SQLite file or
    PostgreSQL schema): as filled, then analyzed; one worker, then `--workers`."""
    fleets = sorted({1, args.workers})
    states = {"no": [False], "yes": [True], "both": [False, True]}[args.analyze]
    cells = [Cell(backend, backlog, state, n) for state in states for n in fleets]
    rates: dict[Cell, float] = {}
    with tempfile.TemporaryDirectory(prefix="heartq-backlog-") as tmp:
        scratch = Path(tmp)
        schema = f"bench_backlog_{os.getpid()}"
        url = (f"sqlite:///{scratch / 'q.db'}" if backend == "sqlite"
               else f"{args.server}?schema={schema}")  # fmt: skip
        try:
            for cell in cells:
                if cell.analyzed and not any(c.analyzed for c in rates):
                    fill(url, backlog)
                    analyze(url)
                rounds = []
                for _ in range(args.rounds):
                    fill(url, backlog)
                    rounds.append(drain(url, args.count, cell.workers, scratch))
                rates[cell] = statistics.median(rounds)
                state = "analyzed" if cell.analyzed else "as filled"
                print(f"{cell.backend:<10} {cell.backlog:>9,} queued, {state:<9}, "
                      f"{cell.workers} worker(s): {rates[cell]:,.0f} jobs/s (rounds: "
                      + ", ".join(f"{r:,.0f}" for r in rounds) + ")", flush=True)
        finally:
            if backend != "sqlite":
                with psycopg.connect(args.server, autocommit=True) as conn:
                    conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")  # type: ignore[arg-type]
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlogs", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=4, help="the larger fleet's size")
    parser.add_argument("--rounds", type=int, default=3, help="measurements a cell (median)")
    parser.add_argument("--backends", nargs="+", default=["sqlite", "postgresql"])
    parser.add_argument("--analyze", choices=["no", "yes", "both"], default="both",
                        help="ANALYZE after the first cells: without, with, or both")  # fmt: skip
    parser.add_argument("--server", default="postgresql://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    rates: dict[Cell, float] = {}
    for backend in args.backends:
        for backlog in args.backlogs:
            rates.update(run_backlog(backend, backlog, args))
    print(f"\n| backend | state | workers | {' | '.join(f'{b:,} queued' for b in args.backlogs)}"
          f" | ratio |\n|---|---|---|{'---|' * len(args.backlogs)}---|")  # fmt: skip
    for row in sorted({cell.row for cell in rates}):
        figures = [rates[Cell(row[0], b, row[1], row[2])] for b in args.backlogs]
        ratio = figures[-1] / figures[0]
        print(f"| {row[0]} | {'analyzed' if row[1] else 'as filled'} | {row[2]} | "
              + " | ".join(f"{f:,.0f}" for f in figures) + f" | **{ratio:.2f}** |")  # fmt: skip


if __name__ == "__main__":
    main()
