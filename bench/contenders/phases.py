"""The arguments of a contender's phase script, run one phase at a time by `bench.cost`.

`python -m bench.cost` measures the enqueue and the work of a contender apart, so it
runs each as a command of its own against a database it made (`--url`), through its
counting relay, and takes its counts between them:

- `setup`: the contender's schema (not measured);
- `enqueue`: `--jobs` no-op jobs, in calls of `--batch` (1: the one-at-a-time call);
- `work`: `--workers` worker processes until every job is done, then exit.

Like `common.py`, standard library only: each script runs in its contender's environment.
"""

from __future__ import annotations

import argparse


def phase_arguments(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("phase", choices=["setup", "enqueue", "work", "work-one"])
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
    parser.add_argument("--timeout", type=float, default=3600.0)
    return parser.parse_args()


def batches(jobs: int, batch: int) -> list[int]:
    """The sizes of the enqueue calls that make `jobs` in calls of at most `batch`."""
    return [min(batch, jobs - offset) for offset in range(0, jobs, batch)]
