"""What the fetch loop does after a claim the database did not answer: the first failure
after a claim that went well is tried again at once (most often the claim's connection
ended under it, and the next claim takes another), a failure after a failure waits
`CLAIM_RETRY_DELAY` (the database is away; a fault that fails at once must not spin),
and neither is followed by the poll interval's sleep. Through the worker's own
`Claimer` and `ClaimFetch` on a real store whose claims are made to fail; a real worker
whose sessions the server terminated: tests/integration/test_terminated_sessions.py."""

from __future__ import annotations

import threading
import time
from typing import Any

import heartq
from heartq.errors import StoreUnavailable
from heartq.model import Claim, WorkerInfo
from heartq.store.interface import Store
from heartq.worker.claimer import CLAIM_RETRY_DELAY, Claimer, ClaimFetch
from heartq.worker.ledger import Ledger
from heartq.worker.store_health import StoreHealth

WORKER = "w-claims"
AT_ONCE = 0.5
"""Seconds within which a round that did not pause ends, on a loaded machine."""


class Failing:
    """A store whose claims fail while `failing` is set, as when the claim's connection
    ended under it."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.failing = True

    def claim(self, *args: Any, **kwargs: Any) -> Claim:
        if self.failing:
            raise StoreUnavailable("terminating connection due to administrator command")
        return self.store.claim(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def test_a_failed_claim_is_tried_again_at_once_then_once_a_second(store: Store) -> None:
    store.register_worker(WorkerInfo(WORKER, "test-host", 1, ("default",), 1))
    store.heartbeat(WORKER, [], 30.0)
    app = heartq.App(store.link.url, poll_interval=30.0)  # a sleep after a failure would show
    failing = Failing(store)
    claimer = Claimer(
        WORKER, app, Ledger(WORKER, 1, app.events), settings=app.settings,
        health=StoreHealth(WORKER, app.events), queues=["default"], stop=threading.Event(),
    )  # fmt: skip
    claimer.store = failing  # type: ignore[assignment]
    fetch = ClaimFetch(claimer, claimer.ledger)

    def timed_round() -> tuple[float, Any]:
        began = time.monotonic()
        done = fetch.round(burst=False)
        return time.monotonic() - began, done

    try:
        took, first = timed_round()
        assert took < AT_ONCE, took  # the first failure: no pause
        assert first.idle is None and not first.busy, first  # and no poll sleep next
        took, second = timed_round()
        assert took >= CLAIM_RETRY_DELAY * 0.95, took  # a failure after a failure
        assert second.idle is None, second
        failing.failing = False
        took, empty = timed_round()  # a claim that went well (nothing queued)
        assert took < AT_ONCE and empty.idle == 30.0, (took, empty)  # then the poll
        failing.failing = True
        took, _ = timed_round()
        assert took < AT_ONCE, took  # at once again after a claim that went well
    finally:
        app.close()
