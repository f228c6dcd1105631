"""A worker whose outcomes cannot be saved stops claiming at `concurrency + MAX_UNSAVED`.

A slot frees when an attempt's code returns, before its outcome is saved. With finishes
held up (here: the table they insert into, locked by the test) a worker used to claim on
at the speed of its code, holding ever more jobs whose outcomes waited; on a million-job
backlog with a bad finish plan it held 459,736, and each heartbeat renewed all of them
(BENCHMARKS.md, "The worker, on both backends"). PostgreSQL: on SQLite the write lock
that holds up a finish holds up the claim too.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import heartq
from heartq.worker.ledger import MAX_UNSAVED
from tests.conftest import only_on
from tests.support import wait_for

from .conftest import WorkerThread

CONCURRENCY = 2
BOUND = CONCURRENCY + MAX_UNSAVED
PATIENT = {"lease": 30.0, "heartbeat_interval": 2.0}
"""A lease that outlasts the test: the finishes wait, and a heartbeat waits behind them
for the rows they locked; no lease may lapse meanwhile (the runtime tests' 0.6 s would,
and the reaper's requeues would blur the count)."""
WATCH = 1.5
"""Seconds the test watches the held jobs at their bound: a worker without it claims
hundreds of no-op jobs a second."""


def count(app: heartq.App, status: str) -> int:
    return sum(n for _, s, n in app.store.count_jobs() if s == status)


@only_on("postgres")  # SQLite's one write lock holds up the claims with the finishes
def test_a_worker_holds_no_more_than_its_bound_while_its_outcomes_wait(
    app: heartq.App, run_worker: Callable[..., WorkerThread]
) -> None:
    @app.task
    def quick() -> None:
        """Returns at once: its slot frees long before its outcome could be saved."""

    total = BOUND + 300
    app.enqueue_many(quick.name, [{}] * total)
    observer = heartq.App(app.store.link.url)
    try:
        with observer.store.link.pool.transaction() as conn:
            # Every finish waits for this lock, from the worker's first one on. The
            # transaction sits idle while the worker fills up (over 10 s on a loaded
            # machine): heartq's own idle-in-transaction timeout would end it, and the lock
            # with it, before the count.
            conn.execute("SET LOCAL idle_in_transaction_session_timeout = 0")
            conn.execute("LOCK TABLE ended_executions IN EXCLUSIVE MODE")
            with run_worker(app, concurrency=CONCURRENCY, **PATIENT):
                wait_for(
                    lambda: count(observer, "running") >= BOUND,
                    30,
                    f"the worker to hold {BOUND} jobs",
                )
                peak, until = 0, time.monotonic() + WATCH
                while time.monotonic() < until:  # an observation window, not a wait
                    peak = max(peak, count(observer, "running"))
                    time.sleep(0.05)
                assert peak == BOUND, f"held {peak} jobs, the bound is {BOUND}"
                assert count(observer, "queued") == total - BOUND
                conn.commit()  # the lock goes: the finishes land
                wait_for(
                    lambda: count(observer, "succeeded") == total,
                    60,
                    "every job to succeed once the finishes land",
                )
    finally:
        observer.close()
