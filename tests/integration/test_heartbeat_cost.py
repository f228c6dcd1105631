"""The heartbeat costs the same few statements per tick whatever the number of running
jobs (DESIGN.md step 2: O(1) statements per tick)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from heartq.store import open_store
from heartq.store.interface import NewJob, Progress, Store, WorkerInfo
from heartq.worker.attempt import RunningJob
from heartq.worker.heartbeat import Heartbeater

WORKER = "w-cost"
LEASE = 30.0


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(f"sqlite:///{tmp_path / 'heartq.db'}")
    opened.migrate()
    yield opened
    opened.close()


def claim_runs(store: Store, n: int) -> list[RunningJob]:
    store.enqueue([NewJob(task="t", args_json=json.dumps({"n": i})) for i in range(n)])
    sent_at = time.monotonic()
    jobs = store.claim(WORKER, ["default"], n, LEASE)
    assert len(jobs) == n
    return [
        RunningJob(
            job, None, store, claim_sent_at=sent_at, trust_window=25.0, max_payload_bytes=1 << 20
        )
        for job in jobs
    ]


def count_tick(store: Store, statements: list[str], runs: list[RunningJob]) -> list[str]:
    lost: list[RunningJob] = []
    beater = Heartbeater(
        store,
        WORKER,
        interval=10.0,
        lease=LEASE,
        trust_window=25.0,
        runs=lambda: runs,
        on_lost=lambda run, reason: lost.append(run),
        on_cancel=lambda run: None,
    )
    statements.clear()
    before = time.monotonic()
    assert beater.tick()
    issued = list(statements)
    assert not lost
    for run in runs:  # every lease was renewed by that one tick
        assert run.trusted_until >= before + 25.0
    return issued


def test_one_tick_costs_the_same_statements_for_1_or_200_jobs(store: Store) -> None:
    store.register_worker(
        WorkerInfo(id=WORKER, hostname="h", pid=1, queues=("default",), concurrency=200)
    )
    runs = claim_runs(store, 201)
    statements: list[str] = []
    store.trace_statements(statements.append)  # type: ignore[attr-defined]

    one = count_tick(store, statements, runs[:1])
    many = count_tick(store, statements, runs[1:])
    for i, run in enumerate(runs[1:]):  # progress for every job rides the same statement
        run.touch(Progress(value=i / 200, stage="s", message=None))
    with_progress = count_tick(store, statements, runs[1:])

    assert len(one) == len(many) == len(with_progress), (one, many, with_progress)
    assert len(many) <= 6, many  # BEGIN, clock, worker row, leases, COMMIT
    renewals = [s for s in many if "heartq_jobs" in s]
    assert len(renewals) == 1, renewals

    job = store.get_job(runs[-1].job.id)
    assert job["progress"]["value"] == pytest.approx(199 / 200)
    assert job["progress"]["stage"] == "s"
