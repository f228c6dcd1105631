"""The arguments of a contender's phase script, run one phase at a time by `bench.cost`.

`python -m bench.cost` measures the enqueue and the work of a contender apart, so it
runs each as a command of its own against a database it made (`--url`), through its
counting relay, and takes its counts between them:

- `setup`: the contender's schema (not measured);
- `enqueue`: `--jobs` no-op jobs, in calls of `--batch` (1: the one-at-a-time call);
- `work`: `--workers` worker processes until every job is done, then exit;
- `flow`: `--workers` worker processes started and up, then `--jobs` jobs enqueued at a
  steady `--rate` a second (`paced`) while they work, then, once every job is done, the
  workers stopped (SIGTERM) and waited for (`bench.cost`'s storage in a steady flow).

Like `common.py`, standard library only: each script runs in its contender's environment.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator

TICK = 0.025
"""The pacer's tick: `bench.pressure_load.Producer`'s (the harness's 25 ms)."""


def phase_arguments(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    phases = ["setup", "enqueue", "work", "work-one", "flow", "flow-one"]
    parser.add_argument("phase", choices=phases)
    parser.add_argument("--url", required=True, help="the contender's database")
    parser.add_argument("--dir", required=True, help="scratch directory (files, stamps)")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=100, help="jobs per enqueue call")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--concurrency", type=int, default=50, help="heartq: slots per worker")
    parser.add_argument("--pool", choices=["thread", "async"], default="thread", help="heartq")
    parser.add_argument("--prefetch", type=int, default=0, help="heartq: claimed ahead")
    parser.add_argument("--claim", type=int, default=100, help="pgqueuer: its batch_size")
    parser.add_argument("--heartbeat-timeout", type=float, default=30.0, help="pgqueuer")
    parser.add_argument("--rate", type=float, default=200.0, help="flow: jobs a second")
    parser.add_argument("--timeout", type=float, default=3600.0)
    return parser.parse_args()


def batches(jobs: int, batch: int) -> list[int]:
    """The sizes of the enqueue calls that make `jobs` in calls of at most `batch`."""
    return [min(batch, jobs - offset) for offset in range(0, jobs, batch)]


def paced(jobs: int, rate: float) -> Iterator[int]:
    """The sizes of enqueue calls that make `jobs` at `rate` a second: every `TICK`,
    what is owed by the time elapsed (credited on the clock, never per turn, so a slow
    call does not lower the rate), one call for it."""
    done = 0
    start = last = time.monotonic()
    while done < jobs:
        due = max(last + TICK, start + (done + 1) / rate)
        time.sleep(max(0.0, due - time.monotonic()))
        last = time.monotonic()
        owed = min(jobs, int((last - start) * rate)) - done
        if owed > 0:
            yield owed
            done += owed


def wait_until(done: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll `done()` every 0.1 s until it is true, or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.1)
