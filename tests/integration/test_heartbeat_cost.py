"""The heartbeat and the pulse cost the same few statements per tick whatever the number
of running jobs (docs/design/protocol.md step 3 and leases.md, "The pulse": O(1) statements per
tick), on every backend (`store`: the per-backend fixture of `tests/conftest.py`; each backend
sends statements of its own)."""

from __future__ import annotations

import json
import re
import time

import pytest

from heartq.event_stream import EventStream
from heartq.model import NewJob, Progress, WorkerInfo
from heartq.store.interface import Store
from heartq.worker.attempt import RunningJob
from heartq.worker.heartbeat import Heartbeater
from heartq.worker.ledger import Ledger
from heartq.worker.pulse import Pulse
from tests.conftest import on_every_backend
from tests.statement_trace import trace

WORKER = "w-cost"
LEASE = 30.0


JOBS_TABLE = re.compile(r"\b(heartq_jobs|jobs|job_documents)\b")
"""The jobs table: `heartq_jobs` in SQLite, `jobs` in the PostgreSQL schema."""


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
    ledger = Ledger(WORKER, len(runs), EventStream())
    for run in runs:
        ledger.claimed(run)
    beater = Heartbeater(
        store, ledger, interval=10.0, lease=LEASE, trust_window=25.0, cancel_grace=5.0
    )
    statements.clear()
    before = time.monotonic()
    assert beater.tick()
    issued = list(statements)
    lost = [run for run in runs if run.lost]
    assert not lost
    for run in runs:  # every lease was renewed by that one tick
        assert run.trusted_until >= before + 25.0
    return issued


def count_pulse(store: Store, statements: list[str], runs: list[RunningJob]) -> list[str]:
    """The statements of one pulse over `runs` (not started: it reads cancels itself, as
    on SQLite)."""
    ledger = Ledger(WORKER, len(runs), EventStream())
    ledger.claimed(*runs)
    pulse = Pulse(store, ledger, interval=1.0, cancel_grace=5.0)
    statements.clear()
    pulse.tick()
    assert not [run for run in runs if run.lost]
    return list(statements)


@on_every_backend  # each backend's own statements, counted
def test_one_tick_costs_the_same_statements_for_1_or_200_jobs(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.register_worker(
        WorkerInfo(id=WORKER, hostname="h", pid=1, queues=("default",), concurrency=200)
    )
    runs = claim_runs(store, 201)
    statements: list[str] = []
    trace(store, statements.append, monkeypatch)

    one = count_tick(store, statements, runs[:1])
    many = count_tick(store, statements, runs[1:])
    runs[0].touch(Progress(value=0.5, stage="s", message=None))
    for i, run in enumerate(runs[1:]):  # progress for every job
        run.touch(Progress(value=i / 200, stage="s", message=None))
    with_progress = count_tick(store, statements, runs[1:])  # the heartbeat: renewals only

    assert len(one) == len(many) == len(with_progress), (one, many, with_progress)
    assert len(many) <= 6, many  # BEGIN, clock, leases' changes, worker row, answer, COMMIT
    renewals = [s for s in many if JOBS_TABLE.search(s)]
    # one write of what changed, and on SQLite the read of the answer (the lease is the
    # worker's: an unchanged attempt's row is not written, so no UPDATE returns it)
    assert len(renewals) <= 2, renewals

    # The progress of every job rides one pulse statement, whatever their number.
    pulse_one = count_pulse(store, statements, runs[:1])
    pulse_many = count_pulse(store, statements, runs[1:])
    assert len(pulse_one) == len(pulse_many), (pulse_one, pulse_many)
    writes = [s for s in pulse_many if JOBS_TABLE.search(s) and "UPDATE" in s.upper()]
    assert len(writes) == 1, pulse_many
    job = store.get_job(runs[-1].job.id)
    assert job["progress"]["value"] == pytest.approx(199 / 200)
    assert job["progress"]["stage"] == "s"
    # Nothing is written when nothing changed: only the read of cancel requests is left.
    idle = count_pulse(store, statements, runs[1:])
    assert [s for s in idle if JOBS_TABLE.search(s) and "UPDATE" in s.upper()] == [], idle
