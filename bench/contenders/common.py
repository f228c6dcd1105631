"""What every contender script shares: its arguments, its stamps and its result line.

A contender script runs in the environment that has its library (heartq's `.venv`, or the
benchmark's own environment for the peers) and imports nothing but the standard library
from here, so the same rules hold for every contender:

- it makes a store of its own (database, schema, file or Redis database), empties it
  at the start and removes it at the end;
- it enqueues `--single` no-op jobs one at a time, then the rest of `--jobs` in batches
  of `--batch` where the library has a batch call, timing each phase;
- it starts `--workers` worker processes and waits until every job is completed;
- the processing rate is jobs / (last committed completion - first handler entry):
  the handler calls `Stamps.entered()` (the first call in each process writes the time),
  and the last completion is the latest completion time the library itself committed
  to its store, read back after the run (where it commits none, the last handler return);
- it writes one JSON object (`Result`) to `--out`.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

FAIR_KEY = "key-{key}"
"""heartq's fairness key template for `--fair-keys` runs: a job's key is its `key`
argument (`fair_key_args`). Shared with `bench.pressure` (`bench/worker_processes.py`)."""


def fair_key_args(n: int, keys: int) -> dict[str, int]:
    """The arguments of the `n`-th job when jobs are spread over `keys` fairness keys,
    each in turn (n mod keys), so every claim meets every key's lane; none when `keys`
    is 0 (no fairness key)."""
    return {"key": n % keys} if keys else {}


@dataclass
class Result:
    """One contender's figures in one round."""

    contender: str
    version: str
    backend: str
    jobs: int
    workers: int
    settings: str
    enqueue_single: float
    """jobs/s, one enqueue call per job."""
    enqueue_batch: float
    """jobs/s, in batches of `batch` (0 when the library has no batch call)."""
    process: float
    """jobs/s, first handler entry to last committed completion."""
    processed: int
    batch: int = 100
    notes: list[str] = field(default_factory=list)

    def write(self, path: str) -> None:
        Path(path).write_text(json.dumps(asdict(self)))


def arguments(description: str) -> argparse.Namespace:
    """The arguments every contender takes (`--work` marks a worker process)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--single", type=int, default=1_000, help="enqueued one at a time")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--pool", choices=["thread", "async"], default="thread",
                        help="heartq: its execution pool; async runs an async no-op task "
                             "(peers ignore it)")  # fmt: skip
    parser.add_argument("--prefetch", type=int, default=0,
                        help="heartq: jobs claimed ahead per worker (peers ignore it)")  # fmt: skip
    parser.add_argument("--fair-keys", type=int, default=0,
                        help="heartq: jobs spread over this many fairness keys (peers "
                             "ignore it)")  # fmt: skip
    parser.add_argument("--key-args", type=int, default=0,
                        help="heartq: jobs with the arguments of --fair-keys N, without "
                             "a fairness key (what a fairness run is compared with)")  # fmt: skip
    parser.add_argument("--claim-commit", choices=["flush", "async"], default="flush",
                        help="heartq on PostgreSQL: async, its claims commit without "
                             "waiting for their flush (peers ignore it)")  # fmt: skip
    parser.add_argument("--server", default="postgresql://postgres@127.0.0.1:5432/test",
                        help="PostgreSQL admin URL: a database of the contender's own is "
                             "created there and dropped after")  # fmt: skip
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/9")
    parser.add_argument("--backend", choices=["sqlite", "postgresql"], default="sqlite",
                        help="for a contender that runs on either")  # fmt: skip
    parser.add_argument("--dir", required=True, help="scratch directory (files, stamps)")
    parser.add_argument("--out", help="where the Result goes (JSON)")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--work", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args()


def database_url(server: str, database: str) -> str:
    """`server` with its database part replaced by `database`."""
    base, _, query = server.partition("?")
    root = base.rsplit("/", 1)[0]
    return f"{root}/{database}" + (f"?{query}" if query else "")


class Stamps:
    """First handler entry per process, as files in one directory (cheap: one flag test)."""

    def __init__(self, directory: str) -> None:
        self.directory = Path(directory) / "stamps"
        self.directory.mkdir(parents=True, exist_ok=True)
        self._entered = False
        self.last_return = 0.0

    def entered(self) -> None:
        if not self._entered:
            self._entered = True
            (self.directory / f"{os.getpid()}.first").write_text(repr(time.time()))

    def returned(self) -> None:
        """For libraries that commit no completion: remember the last handler return."""
        self.last_return = time.time()

    def save_last_return(self) -> None:
        (self.directory / f"{os.getpid()}.last").write_text(repr(self.last_return))

    def first_entry(self) -> float:
        times = [float(p.read_text()) for p in self.directory.glob("*.first")]
        if not times:
            raise RuntimeError("no handler ran: nothing was processed")
        return min(times)

    def last_returns(self) -> float:
        return max(float(p.read_text()) for p in self.directory.glob("*.last"))


def timed(action: Callable[[], object]) -> float:
    """Seconds `action` took."""
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def processes(count: int) -> str:
    """`1 process`, `2 processes`."""
    return f"{count} process" + ("es" if count != 1 else "")


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0


def wait_until(done: Callable[[], bool], timeout: float, poll: float = 0.1) -> None:
    """Poll `done` until it is true; raise after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not finished after {timeout:.0f} s")
        time.sleep(poll)
