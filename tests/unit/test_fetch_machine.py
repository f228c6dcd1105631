"""The fetch strategies under random rounds (hypothesis, stateful): `ClaimFetch` and
`ClaimAheadFetch` over the fake store, while jobs are enqueued, attempts end and are
saved, buffered jobs are cancelled or reclaimed, and the store fails now and then.

After every step:

- F1 the worker never runs more attempts than its concurrency, and never holds more
  jobs claimed ahead than its `prefetch` (none without one);
- F2 the store and the worker agree on what the worker holds: every lease the store
  holds for it, running or claimed ahead, is one the worker knows (none is left to run
  out unrenewed), and every lease the worker renews is one the store holds;
- F3 every job enqueued is in exactly one place: queued, running, claimed ahead, or
  finished; none is started twice under one lease;
- F4 a round is `busy` only if it filled every free slot; with its store answering,
  whenever it did, and a round that left a slot free left nothing in the store it
  could have claimed.
"""

from __future__ import annotations

import itertools
from collections import Counter

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from heartq.lifecycle.fate import AttemptEnd
from heartq.model import Finish, Outcome
from heartq.worker.claimer import ClaimAheadFetch, ClaimFetch
from tests.support import examples

from .fakes import DOWN, Parts, parts

picks = st.integers(min_value=0, max_value=1_000)


class FetchMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ids = itertools.count()
        self.enqueued: set[str] = set()

    @initialize(concurrency=st.integers(1, 3), prefetch=st.sampled_from([0, 1, 2, 5]))
    def build(self, concurrency: int, prefetch: int) -> None:
        self.p: Parts = parts(concurrency=concurrency)
        self.concurrency, self.prefetch = concurrency, prefetch
        ledger, claimer = self.p.ledger, self.p.claimer
        self.fetch = (
            ClaimAheadFetch(claimer, ledger, prefetch) if prefetch else ClaimFetch(claimer, ledger)
        )

    @rule(n=st.integers(1, 4), priority=st.integers(0, 2))
    def enqueue(self, n: int, priority: int) -> None:
        ids = [f"j{next(self.ids)}" for _ in range(n)]
        self.p.store.enqueue(*ids, priority=priority)
        self.enqueued.update(ids)

    @rule()
    def fetch_round(self) -> None:
        faults, before = self.p.store.faults_left(), self.p.ledger.free_slots()
        done = self.fetch.round(burst=False)
        answered = faults == self.p.store.faults_left()
        free = self.p.ledger.free_slots()
        if done.busy:  # F4
            assert free == 0
        if answered:
            assert done.busy == (before > 0 and free == 0), (done, before, free)
            if free > 0:
                assert self.p.store.queued == [], (done, free)

    @precondition(lambda self: self.p.ledger.executing())
    @rule(pick=picks)
    def attempt_ends_and_is_saved(self, pick: int) -> None:
        """A pool reports an attempt's end; the completer saves its outcome."""
        runs = sorted(self.p.ledger.running(), key=lambda r: r.job.id)
        run = runs[pick % len(runs)]
        self.p.ledger.attempt_ended(run, AttemptEnd(Outcome.SUCCEEDED, result_json="1"))
        item = self.p.ledger.outcomes.get_nowait()
        assert item is not None and item[0] is run and isinstance(item[1], Finish)
        assert self.p.store.finish([item[1]]) == []
        self.p.ledger.saved([run])

    @precondition(lambda self: self.p.ledger.buffered())
    @rule(pick=picks, reclaimed=st.booleans())
    def buffered_job_cancelled_or_reclaimed(self, pick: int, reclaimed: bool) -> None:
        """The heartbeater hears that a buffered job's cancel was requested (given back
        by the next round), or that its lease is gone (forgotten)."""
        buffered = self.p.ledger.ahead()[: self.p.ledger.buffered()]
        claimed = buffered[pick % len(buffered)]
        if reclaimed:
            self.p.store.reclaim(claimed.id)
            self.p.ledger.lose_ahead(claimed, "reclaimed")
        else:
            self.p.ledger.cancel_ahead(claimed)

    @rule(method=st.sampled_from(["claim", "start_ahead", "release"]))
    def store_fails_once(self, method: str) -> None:
        self.p.store.fail(method, DOWN)

    @invariant()
    def bounded(self) -> None:  # F1
        assert self.p.ledger.executing() <= self.concurrency
        assert self.p.ledger.buffered() <= self.prefetch

    @invariant()
    def store_and_worker_agree(self) -> None:  # F2
        store, ledger = self.p.store, self.p.ledger
        assert set(store.running) == {r.job.lease for r in ledger.running()}
        assert set(store.ahead) == {j.lease for j in ledger.ahead()}

    @invariant()
    def every_job_in_one_place(self) -> None:  # F3
        store = self.p.store
        places = Counter(
            [w.id for w in store.queued]
            + [x.job_id for x in store.running]
            + [x.job_id for x in store.ahead]
            + [x.job_id for x in store.finished]
        )
        assert set(places) == self.enqueued and set(places.values()) <= {1}, places
        started = Counter(r.job.lease for batch in self.p.pool.started for r in batch)
        assert set(started.values()) <= {1}


FetchMachine.TestCase.settings = settings(
    max_examples=examples(40, thorough=100),
    stateful_step_count=30,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_the_fetch_strategies_keep_their_bounds_under_any_order_of_events = FetchMachine.TestCase
