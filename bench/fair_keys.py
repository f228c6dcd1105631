"""What a claim costs as the number of fairness keys with work grows (docs/design/limits.md,
"Fair shares"): a queue of one priority whose jobs are spread over `--keys` keys, each
key with at least two jobs (`max(2,000, 2 x keys)` jobs in all), one worker's claims of
`--limit` taken from it.

For each key count, a fresh store: on PostgreSQL a database of its own on `--url`'s
server (`heartq_bench_fair_keys`, made again for each count and dropped at the end),
analyzed after the fill (what autovacuum does to a table that grew), three
claims made first (so marks exist), then the claim a one-queue worker sends
(`CLAIM_ONE_QUEUE`) run once under `EXPLAIN (ANALYZE, BUFFERS)` and rolled back: the
buffers it touched and the index entries its scans returned (`bench.held_leases.measure`:
counts, not times, so the machine's load does not blur them). On both backends, the
median time of `--claims` claims made through the store, printed with its ratio to the
first key count's in the same run (a ratio, as times are only read here). Figures
printed, never asserted:

    .venv/bin/python -m bench.fair_keys --keys 1 10 100 1000 5000
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from bench import held_leases
from heartq.model import NewJob
from heartq.store.interface import Store
from heartq.store.postgres import PostgresStore
from heartq.store.postgres import queries as pg_q
from heartq.store.sqlite import SQLiteStore

DATABASE = "heartq_bench_fair_keys"

LEASE = 600.0
WORKER = "fair-keys-bench"


@dataclass(frozen=True, slots=True)
class Cell:
    """One key count on one backend: the claim's counts (PostgreSQL) and its median time."""

    keys: int
    buffers: int | None
    entries: int | None
    claim_ms: float


def _fill(store: Store, keys: int) -> None:
    jobs = [NewJob("t", "{}", fair_key=f"k{i % keys}") for i in range(max(2000, 2 * keys))]
    for first in range(0, len(jobs), 1000):
        store.enqueue(jobs[first : first + 1000])


def _median_claim_ms(store: Store, limit: int, claims: int) -> float:
    times = []
    for _ in range(claims):
        began = time.perf_counter()
        store.claim(WORKER, ["default"], limit, lease=LEASE)
        times.append(time.perf_counter() - began)
    return 1000 * statistics.median(times)


def postgres_cell(server: str, keys: int, limit: int, claims: int) -> Cell:
    """`keys` keys' jobs in a fresh database of `server`, analyzed; the claim counted."""
    url = held_leases.fresh_database(server, DATABASE)
    store = PostgresStore(url)
    try:
        store.link.migrate()
        _fill(store, keys)
        with store.link.pool.autocommit() as conn:
            conn.execute("ANALYZE")
        for _ in range(3):
            store.claim(WORKER, ["default"], limit, lease=LEASE)
        params: dict[str, Any] = {
            "worker_id": WORKER, "queue": "default", "queues": ["default"],
            "limit": limit, "lease": LEASE, "now": None, "ahead": False,
        }  # fmt: skip
        buffers, entries = held_leases.measure(url, pg_q.CLAIM_ONE_QUEUE, params)
        return Cell(keys, buffers, entries, _median_claim_ms(store, limit, claims))
    finally:
        store.link.close()


def sqlite_cell(keys: int, limit: int, claims: int) -> Cell:
    """`keys` keys' jobs in a fresh SQLite file; the claim timed."""
    with tempfile.TemporaryDirectory() as scratch:
        store = SQLiteStore(f"sqlite:///{Path(scratch) / 'q.db'}")
        try:
            _fill(store, keys)
            store.claim(WORKER, ["default"], limit, lease=LEASE)
            return Cell(keys, None, None, _median_claim_ms(store, limit, claims))
        finally:
            store.link.close()


def drop_database(server: str) -> None:
    """The bench's database on `server`, dropped."""
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")


def report(backend: str, cells: list[Cell]) -> None:
    """A table of `cells`, times as ratios to the first."""
    print(f"\n{backend}: a claim of the queue, by fairness keys with work")
    print("| keys | buffers | index entries | claim ms (median) | x the first |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    first = cells[0].claim_ms
    for c in cells:
        counted = (f"{c.buffers:,}", f"{c.entries:,}") if c.buffers is not None else ("-", "-")
        print(f"| {c.keys:,} | {counted[0]} | {counted[1]} | {c.claim_ms:.1f} "
              f"| {c.claim_ms / first:.1f} |", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--keys", type=int, nargs="+", default=[1, 10, 100, 1000, 5000])
    parser.add_argument("--limit", type=int, default=10, help="slots a claim fills")
    parser.add_argument("--claims", type=int, default=20, help="timed claims a key count")
    parser.add_argument("--backends", nargs="+", default=["postgres", "sqlite"],
                        choices=["postgres", "sqlite"])  # fmt: skip
    args = parser.parse_args()
    for backend in args.backends:
        if backend == "postgres":
            cells = [postgres_cell(args.url, k, args.limit, args.claims) for k in args.keys]
            drop_database(args.url)
        else:
            cells = [sqlite_cell(k, args.limit, args.claims) for k in args.keys]
        report(backend, cells)


if __name__ == "__main__":
    main()
