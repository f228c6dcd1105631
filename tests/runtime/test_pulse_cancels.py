"""The pulse's cancels on a real store of each backend: a cancel heard while the worker's
ledger does not hold the job yet (it was claimed, not yet handed over) is not lost, and
reaches the attempt at the next pulse after the ledger holds it, whether or not the
ledger held other attempts when the read that followed the notification asked about
them."""

from __future__ import annotations

import json
import time

from heartq.event_stream import EventStream
from heartq.model import ClaimedJob, NewJob
from heartq.store import Store
from heartq.worker.attempt import RunningJob
from heartq.worker.ledger import Ledger
from heartq.worker.pulse import Pulse
from tests.conftest import on_every_backend
from tests.support import wait_for

WORKER = "w-pulse"

pytestmark = on_every_backend  # PostgreSQL hears cancels (LISTEN); SQLite reads them


def test_a_cancel_heard_before_the_ledger_holds_the_job_is_kept(store: Store) -> None:
    ledger = Ledger(WORKER, 2, EventStream())
    pulse = Pulse(store, ledger, interval=60.0, cancel_grace=5.0)  # ticks when woken
    pulse.start()  # PostgreSQL: listens for this worker's cancels
    try:
        (job_id,) = store.enqueue([NewJob(task="t", args_json=json.dumps({}))])
        sent_at = time.monotonic()
        (job,) = store.claim(WORKER, ["default"], 1, 30.0)
        store.cancel_job(job_id, by="test")
        if store.link.supports_notify:  # heard, and woke a pulse while nothing is held
            wait_for(lambda: pulse._cancel_heard.is_set(), 10, "the cancel notification")
        pulse.tick()  # a pulse while the ledger holds nothing yet
        run = RunningJob(
            job, None, store, claim_sent_at=sent_at, trust_window=25.0, max_payload_bytes=1 << 20
        )
        ledger.claimed(run)
        pulse.tick()
        assert run.cancel_requested
        assert run.cancel_deadline is not None  # told through the ledger, with its grace
    finally:
        pulse.stop()


def _run(store: Store, job: ClaimedJob, sent_at: float) -> RunningJob:
    return RunningJob(
        job, None, store, claim_sent_at=sent_at, trust_window=25.0, max_payload_bytes=1 << 20
    )


def test_a_cancel_of_a_job_handed_over_after_the_read_is_kept(store: Store) -> None:
    """The read asks only about the attempts the ledger holds: one that held another
    attempt when it read, but not yet the cancelled job (claimed before the notification,
    handed over after that read), reads again once it holds it. The pulse listens, but
    its loop is not started: only the test ticks it."""
    ledger = Ledger(WORKER, 2, EventStream())
    pulse = Pulse(store, ledger, interval=60.0, cancel_grace=5.0)
    pulse._listener = store.link.listen_cancels(WORKER, pulse._on_cancel)
    pulse._polls_cancels = pulse._listener is None
    try:
        store.enqueue([NewJob(task="t", args_json=json.dumps({})) for _ in range(2)])
        sent_at = time.monotonic()
        first, second = store.claim(WORKER, ["default"], 2, 30.0)
        ledger.claimed(other := _run(store, first, sent_at))
        store.cancel_job(second.id, by="test")
        if store.link.supports_notify:
            wait_for(lambda: pulse._cancel_heard.is_set(), 10, "the cancel notification")
        pulse.tick()  # asks about `first` only
        assert not other.cancel_requested
        ledger.claimed(run := _run(store, second, sent_at))
        pulse.tick()
        assert run.cancel_requested and run.cancel_deadline is not None
        assert not other.cancel_requested
    finally:
        pulse.stop()
