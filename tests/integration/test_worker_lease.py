"""The worker's side of its lease (docs/design/leases.md, "Leases and heartbeats"): its heartbeat
renews one lease, its own, which covers every attempt it holds attached, so what it no
longer holds must leave that cover: a lease its ledger drops without a written end is
named to detach by the next tick, and a claim that raised (committed, its answer lost)
makes the next tick sweep. Each is then reaped when its own lease runs out, while the
worker beats on. (A silent task's attempt: tests/integration/test_hang_and_cancel.py.)
On every backend: the statements are each backend's own."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

import heartq
from heartq.errors import StoreUnavailable
from heartq.event_stream import EventStream
from heartq.model import Claim, Lease, NewJob, Renewal, WorkerInfo
from heartq.store.interface import Store
from heartq.worker.attempt import RunningJob
from heartq.worker.claimer import Claimer
from heartq.worker.heartbeat import Heartbeater
from heartq.worker.ledger import Ledger
from heartq.worker.store_health import StoreHealth
from tests.conftest import on_every_backend

WORKER = "w-lease"
LEASE = 30.0


def _leased_worker(store: Store, jobs: int) -> None:
    """`WORKER` registered and leased (one heartbeat), `jobs` jobs queued."""
    store.register_worker(WorkerInfo(WORKER, "test-host", 1, ("default",), 4))
    store.heartbeat(WORKER, [], LEASE)
    store.enqueue([NewJob(task="t", args_json=json.dumps({"n": i})) for i in range(jobs)])


def _held_runs(store: Store, n: int) -> list[RunningJob]:
    """`n` attempts `WORKER` (leased) claimed, as its ledger holds them."""
    _leased_worker(store, n)
    sent_at = time.monotonic()
    return [
        RunningJob(job, None, store, claim_sent_at=sent_at, trust_window=25.0,
                   max_payload_bytes=1 << 20)
        for job in store.claim(WORKER, ["default"], n, LEASE)
    ]  # fmt: skip


def _beater(store: Store, ledger: Ledger) -> Heartbeater:
    return Heartbeater(
        store, ledger, interval=10.0, lease=LEASE, trust_window=25.0, cancel_grace=5.0
    )


def _reaped_while_it_beats(store: Store, named: Sequence[Lease]) -> set[str]:
    """The jobs the reaper takes once every floor ran out, the worker beating on and
    naming `named` (its lease covers those)."""
    later = store.clock() + 2 * LEASE
    store.heartbeat(WORKER, [Renewal(x) for x in named], LEASE, now=later)
    return {r.job_id for r in store.reclaim_expired("lease_expired", now=later + 1)}


@on_every_backend
def test_a_lease_the_ledger_drops_is_detached_by_the_next_tick(store: Store) -> None:
    """Trap 2: the ledger drops an attempt's lease (`lose`: untrusted, forced lost) and
    reports nothing of it, so no end is written; the next tick names it to detach, and
    it runs out on its own lease, not kept alive by its worker's."""
    kept, dropped = _held_runs(store, 2)
    ledger = Ledger(WORKER, 2, EventStream())
    ledger.claimed(kept, dropped)
    ledger.lose(dropped, "lease not renewed in time")
    assert ledger.to_detach() == [dropped.job.lease]
    assert _beater(store, ledger).tick()
    assert ledger.to_detach() == []  # landed: named once
    assert _reaped_while_it_beats(store, [kept.job.lease]) == {dropped.job.id}


class AnswerLost:
    """A store whose claims commit and then lose their answer (the connection cut)."""

    def __init__(self, store: Store, *, raises: bool = True) -> None:
        self.store = store
        self.raises = raises  # else it answers, saying a statement of it went unanswered

    def claim(self, *args: Any, **kwargs: Any) -> Claim:
        self.store.claim(*args, **kwargs)
        if self.raises:
            raise StoreUnavailable("the connection was cut before the claim's answer came")
        return Claim(unanswered=True)  # as a claim ahead that raised after the slots'

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


@on_every_backend
@pytest.mark.parametrize("raises", [True, False], ids=["raised", "unanswered"])
def test_a_claim_whose_answer_was_lost_is_swept_by_the_next_tick(
    store: Store, raises: bool
) -> None:
    """Trap 1: a claim that raised may have committed: its job runs under this worker,
    which never heard of it, and its heartbeats would cover it for ever (stuck). The
    claimer asks for a sweep; the next tick detaches what it does not name, and the
    reaper takes it once its lease runs out."""
    _leased_worker(store, 1)
    app = heartq.App(store.link.url, lease=LEASE, heartbeat_interval=LEASE / 3)
    stop = threading.Event()
    stop.set()  # no pause after the failed claim
    ledger = Ledger(WORKER, 1, app.events)
    claimer = Claimer(
        WORKER, app, ledger, settings=app.settings, health=StoreHealth(WORKER, app.events),
        queues=["default"], stop=stop,
    )  # fmt: skip
    claimer.store = AnswerLost(store, raises=raises)  # type: ignore[assignment]
    try:
        answer = claimer.claim(for_slots=True, ahead=0)
        assert answer is None if raises else answer == []
        (running,) = store.list_jobs(status="running")
        assert running["worker_id"] == WORKER
        assert _beater(store, ledger).tick()
        assert _reaped_while_it_beats(store, []) == {running["id"]}
    finally:
        app.close()


@on_every_backend
def test_a_worker_holds_its_lease_before_it_claims(harness: Any) -> None:
    """A worker's first beat comes at its start, before its first claim: the attempts it
    claims before the heartbeater's first tick (an interval later) are covered by its
    lease, not detached one by one at their floors (a write and an index entry each)."""
    slow_beats = {"--heartbeat-interval": "20", "--lease": "60"}
    worker_id = harness.wait_started(harness.start_worker(settings=slow_beats, wait=False))
    sqlite = harness.backend == "sqlite"
    table, mark = ("heartq_workers", "?") if sqlite else ("workers", "%s")
    with harness.store._write() as conn:
        row = conn.execute(
            f"SELECT lease_expires_at FROM {table} WHERE id = {mark}", (worker_id,)
        ).fetchone()
    assert row is not None and row["lease_expires_at"] is not None
