"""The load and the faults of `bench.pressure`: a paced producer, a held snapshot, and
REPEATABLE READ readers (the workers: `bench/pressure_contenders.py`).

Each is what the cells of the public harness for PostgreSQL queues
(hardbyte/postgresql-job-queue-benchmarking: `bench_harness/pacer.py` and `hooks.py`)
do, so heartq's figures read against the ones it publishes:

- the producer credits jobs on real elapsed time, never per loop turn, and enqueues what
  it owes in one batch call every 25 ms (at most 128 jobs a call), so a slow enqueue
  does not lower the offered rate;
- the snapshot holder opens a REPEATABLE READ transaction, takes its snapshot and a
  transaction id (`txid_current()`, as the harness's idle-in-transaction holder does),
  then sits idle in transaction until released: the database's xmin horizon stays where
  it was, and vacuum can remove nothing newer;
- each reader opens a REPEATABLE READ transaction and scans a queue table every 0.1 s
  in it, never committing until released (the harness's active readers): a scan load
  and, with it, a horizon held for the phase.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Protocol

import psycopg
from psycopg import sql

BATCH_SECONDS = 0.025
"""The producer's tick: the harness's `PRODUCER_BATCH_MS` (25)."""
BATCH_MAX = 128
"""The most jobs one enqueue call carries: the harness's `batch_max`."""
WORKER_APP = "pressure-worker"
"""The workers' `application_name`, to tell their sessions from the bench's."""


class Enqueue(Protocol):
    """A contender's batch enqueue of `count` no-op jobs, and its end."""

    def __call__(self, count: int) -> None: ...

    def close(self) -> None: ...


class Producer:
    """Enqueues no-op jobs at `rate` jobs/s (changed between phases by `set_rate`) from a
    thread of its own, through `enqueue`, until `stop`."""

    def __init__(self, enqueue: Enqueue, rate: float) -> None:
        self.rate = rate
        self.enqueued = 0
        self.behind_s = 0.0
        """The most jobs owed after a call, in seconds of the rate: large when an enqueue
        call took longer than the jobs it carried were worth (the phase was not offered
        its rate; its `enqueued_per_s`, read from the database, says how far)."""
        self._enqueue = enqueue
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)
        self.error: Exception | None = None

    def start(self) -> None:
        self._thread.start()

    def set_rate(self, rate: float) -> None:
        self.rate = rate

    def _run(self) -> None:
        credit, last = 0.0, time.monotonic()
        try:
            while not self._stop.is_set():
                self._stop.wait(max(0.0, BATCH_SECONDS - (time.monotonic() - last)))
                now = time.monotonic()
                credit += (now - last) * self.rate
                last = now
                count = min(int(credit), BATCH_MAX)
                if count:
                    self._enqueue(count)
                    self.enqueued += count
                    credit -= count
                    self.behind_s = max(self.behind_s, credit / self.rate)
        except Exception as error:  # noqa: BLE001 - stop() raises it: a producer that died
            self.error = error

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self._enqueue.close()
        if self.error is not None:
            raise RuntimeError(f"the producer failed: {self.error!r}") from self.error


class SnapshotHolder:
    """Another session of the same database idle in a REPEATABLE READ transaction that
    holds a snapshot and a transaction id, from `start` until `release`."""

    def __init__(self, url: str) -> None:
        self._conn = psycopg.connect(url, autocommit=True, application_name="pressure-holder")
        self.xid = 0

    def start(self) -> None:
        self._conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        row = self._conn.execute("SELECT txid_current()").fetchone()
        self.xid = int(row[0]) if row else 0

    def release(self) -> None:
        self._conn.execute("ROLLBACK")
        self._conn.close()


class Readers:
    """`count` sessions, each scanning `table` every 0.1 s inside one REPEATABLE READ
    transaction that lasts until `release`."""

    def __init__(self, url: str, table: sql.Composable, count: int = 4) -> None:
        self._query = sql.SQL("SELECT count(*) FROM {}").format(table)
        self._url = url
        self._stop = threading.Event()
        self.scans = 0
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._read, name=f"reader-{n}", daemon=True)
            for n in range(count)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def _read(self) -> None:
        with psycopg.connect(self._url, application_name="pressure-reader") as conn:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            while not self._stop.is_set():
                conn.execute(self._query).fetchall()
                with self._lock:
                    self.scans += 1
                self._stop.wait(0.1)
            conn.rollback()

    def release(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)


def server_settings() -> dict[str, Any]:
    """The private cluster's settings: the harness's `postgres.conf` (autovacuum at
    PostgreSQL's defaults, written out; fsync and synchronous commit on), with
    `max_connections` left at its default 100 (a few workers here, not 4 replicas); the
    WAL flushes timed (`track_wal_io_timing`: two clock reads a flush), and checkpoints
    and lock waits over a second logged."""
    return {
        "fsync": "on",
        "synchronous_commit": "on",
        "shared_buffers": "256MB",
        "work_mem": "8MB",
        "maintenance_work_mem": "128MB",
        "wal_level": "replica",
        "autovacuum": "on",
        "autovacuum_naptime": "60s",
        "autovacuum_vacuum_cost_delay": "2ms",
        "autovacuum_vacuum_cost_limit": "200",
        "autovacuum_vacuum_scale_factor": "0.2",
        "autovacuum_analyze_scale_factor": "0.1",
        "autovacuum_vacuum_threshold": "50",
        "autovacuum_analyze_threshold": "50",
        "log_autovacuum_min_duration": "0",
        "track_wal_io_timing": "on",  # a measure, not a load: the flushes' times
        "log_checkpoints": "on",  # and what a stall is read from (`--logs`)
        "log_lock_waits": "on",
    }
