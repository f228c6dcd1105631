"""SQLite enqueue one at a time, taken apart: where an acknowledged enqueue's time goes.

Each variant enqueues `--jobs` jobs one call (and one commit) at a time into a fresh
file; the variants run round by round in rotating order, so every ratio printed comes
from the same rounds on the same machine. Variants:

- `commit <sync>`: one-row INSERT transactions into a two-column table (the disk's
  limit at that `synchronous`, as `bench/limits.py` measures it);
- `huey`: SqliteHuey's own `enqueue` (its defaults: WAL, SQLite's `synchronous`, FULL
  here), run with the peers' interpreter (`.bench-venv`, see `python -m bench`) when it
  is there;
- `statement <sync>`: heartq's own statements for one job (`BEGIN IMMEDIATE`, the clock,
  `INSERT_JOB`, `COMMIT`) on its schema, straight through `sqlite3`, no heartq code;
- `store <sync>`: `Store.enqueue([NewJob])`;
- `app <sync>`: `App.enqueue("noop")`, the whole path (a registered task);
- `app x8 <sync>`: the same from 8 threads at once (a web server's threads enqueuing into
  one file: their enqueues share commits, `SharedCommit`, `store/sqlite/connection.py`).

`<sync>` is `full` (heartq's default) or `normal` (`?synchronous=normal`, see
docs/OPERATIONS.md for what it risks). Run:

    .venv/bin/python bench/enqueue_one.py --jobs 2000 --rounds 5

Figures are printed (median jobs/s, min-max, each variant's median over huey's and over
the commit limit at the same `synchronous`, and the CPU time per enqueue: what is left
once the wait for the disk is taken out, the part a quieter disk does not shrink),
never asserted.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PEERS = ROOT / ".bench-venv" / "bin" / "python"

HUEY = textwrap.dedent(
    """
    import sys, time
    from huey import SqliteHuey
    huey = SqliteHuey("bench", filename=sys.argv[1])

    @huey.task()
    def noop():
        return None

    count = int(sys.argv[2])
    started, cpu = time.perf_counter(), time.process_time()
    for _ in range(count):
        noop()
    print(count / (time.perf_counter() - started), (time.process_time() - cpu) / count)
    """
)


def commits(path: Path, jobs: int, synchronous: str) -> tuple[float, float]:
    """One-row INSERT transactions/s (the disk's limit)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    timer = Timer(jobs)
    for _ in range(jobs):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t (v) VALUES (?)", ("x",))
        conn.execute("COMMIT")
    figures = timer.done()
    conn.close()
    return figures


def huey(path: Path, jobs: int) -> tuple[float, float]:
    done = subprocess.run(
        [str(PEERS), "-c", HUEY, str(path), str(jobs)], capture_output=True, text=True, check=True
    )
    rate, cpu = done.stdout.split()
    return float(rate), float(cpu)


class Timer:
    """Wall rate and CPU time per job of a loop (CPU: this process's own work, what
    remains when the disk's wait is taken out)."""

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def done(self) -> tuple[float, float]:
        wall = time.perf_counter() - self.wall
        return self.jobs / wall, (time.process_time() - self.cpu) / self.jobs


def statements(path: Path, jobs: int, synchronous: str) -> tuple[float, float]:
    """heartq's statements for one job, without heartq around them."""
    from heartq.ids import new_job_id
    from heartq.model import NewJob
    from heartq.store import documents, open_store
    from heartq.store.sqlite import queries as q

    open_store(f"sqlite:///{path}").link.migrate()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA synchronous={synchronous}")
    # the document the store itself writes for a plain job (every column it inserts)
    doc = documents.new_job_doc(NewJob(task="noop", args_json="{}", chosen=0))
    timer = Timer(jobs)
    for _ in range(jobs):
        conn.execute("BEGIN IMMEDIATE")
        now = conn.execute(q.NOW).fetchone()[0]
        conn.execute(q.INSERT_JOB, dict(doc, id=new_job_id(), now=now))
        conn.execute("COMMIT")
    figures = timer.done()
    conn.close()
    return figures


def _url(path: Path, synchronous: str) -> str:
    return f"sqlite:///{path}" + ("?synchronous=normal" if synchronous == "normal" else "")


def store(path: Path, jobs: int, synchronous: str) -> tuple[float, float]:
    from heartq.model import NewJob
    from heartq.store import open_store

    opened = open_store(_url(path, synchronous))
    opened.link.migrate()
    opened.enqueue([NewJob(task="noop", args_json="{}")])  # the connection opened
    timer = Timer(jobs)
    for _ in range(jobs):
        opened.enqueue([NewJob(task="noop", args_json="{}")])
    figures = timer.done()
    opened.link.close()
    return figures


def app(path: Path, jobs: int, synchronous: str, threads: int = 1) -> tuple[float, float]:
    """`jobs` enqueues of a registered task, one a call, from `threads` threads at once."""
    import heartq

    queue = heartq.App(_url(path, synchronous))

    @queue.task
    def noop() -> None:
        return None

    queue.migrate()
    queue.enqueue("noop")
    start = threading.Barrier(threads + 1)
    failed: list[BaseException] = []

    def enqueue(count: int) -> None:
        start.wait()
        try:
            for _ in range(count):
                queue.enqueue("noop")
        except BaseException as exc:  # a thread that stopped early would inflate the rate
            failed.append(exc)
            raise

    shares = [jobs // threads + (1 if i < jobs % threads else 0) for i in range(threads)]
    workers = [threading.Thread(target=enqueue, args=(n,)) for n in shares]
    for worker in workers:
        worker.start()
    start.wait()
    timer = Timer(jobs)
    for worker in workers:
        worker.join()
    figures = timer.done()
    queue.close()
    if failed:
        raise RuntimeError(f"{len(failed)} of {threads} enqueuing threads failed: {failed[0]!r}")
    return figures


def variants(names: list[str]) -> dict[str, Callable[[Path, int], tuple[float, float]]]:
    every: dict[str, Callable[[Path, int], tuple[float, float]]] = {
        "commit full": lambda p, n: commits(p, n, "FULL"),
        "commit normal": lambda p, n: commits(p, n, "NORMAL"),
        "statement full": lambda p, n: statements(p, n, "FULL"),
        "store full": lambda p, n: store(p, n, "full"),
        "app full": lambda p, n: app(p, n, "full"),
        "app x8 full": lambda p, n: app(p, n, "full", threads=8),
        "statement normal": lambda p, n: statements(p, n, "NORMAL"),
        "store normal": lambda p, n: store(p, n, "normal"),
        "app normal": lambda p, n: app(p, n, "normal"),
    }
    if PEERS.exists():
        every["huey"] = huey
    return {k: v for k, v in every.items() if not names or k in names}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000, help="enqueues per variant and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", default="", help="comma-separated variant names")
    args = parser.parse_args()
    chosen = variants([x.strip() for x in args.only.split(",") if x.strip()])
    names = list(chosen)
    rates: dict[str, list[float]] = {name: [] for name in names}
    cpus: dict[str, list[float]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="heartq-enqueue-one-") as tmp:
        for number in range(args.rounds):
            order = names[number % len(names) :] + names[: number % len(names)]
            for name in order:
                path = Path(tmp) / f"{number}-{name.replace(' ', '-')}.db"
                rate, cpu = chosen[name](path, args.jobs)
                rates[name].append(rate)
                cpus[name].append(cpu * 1e6)
            print(f"round {number + 1}: " + ", ".join(f"{n} {rates[n][-1]:,.0f}" for n in names),
                  flush=True)  # fmt: skip
    medians = {name: statistics.median(values) for name, values in rates.items()}
    print(f"\n{args.jobs} enqueues per variant, {args.rounds} rounds, jobs/s; CPU: this"
          " process's CPU time per enqueue (the wait for the disk taken out)")  # fmt: skip
    print("| variant | median | min - max | / huey | / commit limit (same sync) | CPU us |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in names:
        sync = "normal" if name.endswith("normal") else "full"
        limit = medians.get(f"commit {sync}")
        over_huey = f"{medians[name] / medians['huey']:.2f}" if "huey" in medians else ""
        over_limit = f"{medians[name] / limit:.2f}" if limit else ""
        low, high = min(rates[name]), max(rates[name])
        print(f"| {name} | {medians[name]:,.0f} | {low:,.0f} - {high:,.0f} | {over_huey}"
              f" | {over_limit} | {statistics.median(cpus[name]):.0f} |")  # fmt: skip

if __name__ == "__main__":
    sys.exit(main())
