"""What `bench.pressure` measures, all of it read from the database.

- **Samples** every few seconds and at each phase's edges (`Sampler`): the queue's depth,
  and per table of the queue `pg_stat_user_tables`' live and dead tuples and autovacuum
  runs, the table's size and its indexes' size; the age of the oldest snapshot
  (`backend_xmin`, in transactions: the held horizon, seen), the load average, and the
  cluster's WAL bytes and full-page images so far (`pg_stat_wal`).
- **Per phase, after the run** (`phase_figures`), from the rows' own times, on the
  server's clock: jobs enqueued (`created_at`) and completed (`finished_at`) in the
  phase's window, and the pickup, `started_at - run_at` (when the job became runnable
  to when its attempt started), of the jobs picked up in it: p50 and p99 over the
  phase, and p99 over its last minute (what the issue's goal compares); the WAL bytes
  and full-page images written in the phase per job completed.
- **Storage** (`storage`), once the queue is drained and every worker stopped: a plain
  VACUUM of the queue's tables, then their total size (heap, indexes, TOAST) per
  finished job, and `pgstattuple`'s free space of each (`bench.table_storage`, which
  `bench.cost` measures with too).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

import psycopg

from bench import table_storage

Row = dict[str, Any]


@dataclass(frozen=True)
class Subject:
    """A queue measured: its schema, the tables it writes, and how its depth and its
    jobs' times are read (`bench/pressure_contenders.py` has heartq's and pgqueuer's)."""

    name: str
    schema: str
    tables: tuple[str, ...]
    """Its tables, its queue's first (the readers scan it; the phase table shows it)."""
    depth: str
    """Jobs waiting to run, now."""
    window: str
    """Over [%(start)s, %(end)s) in epoch seconds: enqueued, completed, and the pickups'
    count, p50 and p99 in seconds."""
    finished: str
    """Jobs finished (every one, for the storage figure)."""
    unfinished: str
    """Jobs not finished successfully once: (waiting or running, ended otherwise or
    retried) - what the run's check wants at zero."""
    fair_keys: str = "SELECT 0"
    """The fairness keys its jobs had (`--fair-keys`; 0 for a queue without them)."""


TABLES = """
SELECT relname, n_live_tup, n_dead_tup, autovacuum_count, autoanalyze_count,
       pg_table_size(relid) AS table_bytes, pg_indexes_size(relid) AS index_bytes
FROM pg_stat_user_tables WHERE schemaname = %(schema)s AND relname = ANY(%(tables)s)
"""
COUNTS = ("live", "dead", "autovacuum", "autoanalyze", "table_bytes", "index_bytes")
"""What TABLES reads of each table, after its name."""
HORIZON = """
SELECT coalesce(max(age(backend_xmin)), 0), extract(epoch FROM clock_timestamp())::float8
FROM pg_stat_activity WHERE datname = current_database()
"""


WAL = "SELECT wal_bytes, wal_fpi, wal_sync, wal_sync_time FROM pg_stat_wal"
"""The cluster's WAL written so far (PostgreSQL 14+), and the full-page images among it (a
page's first change after a checkpoint is logged whole, 8 KB): a private cluster's, so
all of it the cell's. What a phase's commits had to flush, a job at a time. And its
flushes to disk and the milliseconds they took (`track_wal_io_timing`, set by
`server_settings`): a commit waits for its flush, so a pickup, which runs from the
enqueue's statement to the claim's, carries the enqueue's flush whole."""


def clock(conn: psycopg.Connection[Any]) -> float:
    """The server's clock, epoch seconds: the phases' edges are on it, as the rows' times."""
    row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
    return float(row[0]) if row else 0.0


class Sampler:
    """One sample every `every` seconds from a thread of its own, and one at each call
    of `sample` (a phase's edge); all kept in `samples`, in order."""

    def __init__(self, url: str, subject: Subject, every: float) -> None:
        self.subject = subject
        self.samples: list[Row] = []
        # The subject's schema first: its depth may name its tables unqualified.
        self._conn = psycopg.connect(url, autocommit=True, application_name="pressure-sampler",
                                     options=f"-c search_path={subject.schema}")
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._every = every
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            self.sample()

    def sample(self) -> Row:
        with self._lock:
            conn, subject = self._conn, self.subject
            depth = conn.execute(subject.depth).fetchone()
            horizon = conn.execute(HORIZON).fetchone()
            rows = conn.execute(
                TABLES, {"schema": subject.schema, "tables": list(subject.tables)}
            ).fetchall()
            wal = conn.execute(WAL).fetchone()
            assert depth is not None and horizon is not None and wal is not None
            sample: Row = {
                "t": float(horizon[1]),
                "wal_bytes": int(wal[0]),
                "wal_fpi": int(wal[1]),
                "wal_syncs": int(wal[2]),
                "wal_sync_ms": float(wal[3]),
                "depth": int(depth[0]),
                "horizon_age": int(horizon[0]),
                "load": os.getloadavg()[0],
                "tables": {
                    str(r[0]): dict(zip(COUNTS, map(int, r[1:]), strict=True)) for r in rows
                },
            }
            self.samples.append(sample)
            return sample

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        self._conn.close()


def phase_figures(
    conn: psycopg.Connection[Any], subject: Subject, phase: Row, samples: list[Row]
) -> Row:
    """One phase's figures: `phase` has its name, offered rate, `start` and `end` (the
    server's clock); `samples` are every sample of the run."""
    start, end = phase["start"], phase["end"]
    seconds = end - start
    inside = [s for s in samples if start <= s["t"] <= end]
    first, last = inside[0], inside[-1]
    enqueued, completed, picked, p50, p99 = _window(conn, subject, start, end)
    *_, p99_last = _window(conn, subject, max(start, end - 60.0), end)
    hot = subject.tables[0]
    return {
        "phase": phase["name"],
        "seconds": seconds,
        "offered_rate": phase["rate"],
        "enqueued_per_s": enqueued / seconds,
        "completed_per_s": completed / seconds,
        "picked": picked,
        "pickup_p50_ms": _ms(p50),
        "pickup_p99_ms": _ms(p99),
        "pickup_p99_last_minute_ms": _ms(p99_last),
        "depth_end": last["depth"],
        "depth_max": max(s["depth"] for s in inside),
        "horizon_age_max": max(s["horizon_age"] for s in inside),
        "load_max": max(s["load"] for s in inside),
        "dead_end": last["tables"][hot]["dead"],
        "dead_max": max(s["tables"][hot]["dead"] for s in inside),
        "dead_all_tables_end": sum(t["dead"] for t in last["tables"].values()),
        "table_bytes_end": last["tables"][hot]["table_bytes"],
        "index_bytes_end": last["tables"][hot]["index_bytes"],
        "all_tables_bytes_end": sum(
            t["table_bytes"] + t["index_bytes"] for t in last["tables"].values()
        ),
        "autovacuum_runs": {
            name: last["tables"][name]["autovacuum"] - first["tables"][name]["autovacuum"]
            for name in subject.tables
            if name in last["tables"] and name in first["tables"]
        },
        "producer_behind_s": phase.get("producer_behind_s", 0.0),
        "wal_bytes_per_job": (last["wal_bytes"] - first["wal_bytes"]) / completed
        if completed else None,
        "wal_fpi_per_job": (last["wal_fpi"] - first["wal_fpi"]) / completed if completed else None,
        "wal_syncs_per_s": (last["wal_syncs"] - first["wal_syncs"]) / seconds,
        "wal_sync_mean_ms": (last["wal_sync_ms"] - first["wal_sync_ms"]) / syncs
        if (syncs := last["wal_syncs"] - first["wal_syncs"]) else None,
        "worker_cpu_us_per_job": phase["worker_cpu_s"] * 1e6 / completed
        if completed and "worker_cpu_s" in phase else None,
    }


def _window(
    conn: psycopg.Connection[Any], subject: Subject, start: float, end: float
) -> tuple[int, int, int, float | None, float | None]:
    row = conn.execute(subject.window, {"start": start, "end": end}).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2]), row[3], row[4]


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def storage(conn: psycopg.Connection[Any], subject: Subject) -> Row:
    """Bytes per finished job after a plain VACUUM of the queue's tables, and each
    table's free space by `pgstattuple` (`bench.table_storage`). Run with no worker left
    and no snapshot held, so the VACUUM removes every dead version."""
    row = conn.execute(subject.finished).fetchone()
    finished = int(row[0]) if row else 0
    names = list(subject.tables)
    table_storage.vacuum(conn, subject.schema, names)
    tables = table_storage.measure(conn, subject.schema, names)
    total_bytes = sum(t["total_bytes"] for t in tables.values())
    return {
        "finished_jobs": finished,
        "total_bytes": total_bytes,
        "bytes_per_finished_job": total_bytes / finished if finished else None,
        "tables": tables,
    }


def unfinished(conn: psycopg.Connection[Any], subject: Subject) -> tuple[int, int]:
    """(jobs still waiting or running, jobs that ended otherwise or ran more than once)."""
    row = conn.execute(subject.unfinished).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def fair_keys(conn: psycopg.Connection[Any], subject: Subject) -> int:
    """The fairness keys its jobs had (0 for a run without them)."""
    row = conn.execute(subject.fair_keys).fetchone()
    assert row is not None
    return int(row[0])
