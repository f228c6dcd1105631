"""The ledger under random sequences of what the worker's parts do (hypothesis, stateful).

The fetch loop claims (into free slots only, some claims repeating a lease the worker
still holds), buffers jobs claimed ahead and starts or gives them back; pools report the
end of attempts' code; the supervisor forces ends; the heartbeater loses leases,
requests cancels, marks leases untrusted and lands detaches; tasks commit their own
transaction; the completer takes the queued outcomes and saves them or finds them
lost. A small model (sets of leases) says what the ledger must show after every step:

- L1 slots: `executing()` counts the attempts whose code has not returned, whoever
  decided their end; `free_slots()` is what is left of the concurrency, and never more
  than keeps the attempts held within `concurrency + MAX_UNSAVED` (a small bound here);
- L2 an end is decided once: an attempt's outcome is queued for the completer at most
  once, and it is queued (or its lease reported lost, or it was released) as soon as
  its end is decided, before it stops counting as `undecided()`;
- L3 `abandoned()` is exactly the attempts decided while their code still runs;
- L4 `lease_lost` is told at most once per attempt; a lost attempt leaves `running()`
  and stays in `to_detach()` until a heartbeat naming it lands;
- L5 what is queued fits how the attempt ended: a `Finish` never for a lost, crashed,
  released or committed attempt; a lost attempt whose lease was lost before its end
  gets no `Finish`;
- L6 `held()` is what is running, but lost or completed by its own transaction;
- L7 the buffer takes no slot, starts best first (priority, then age), and what is
  given back (cancelled, refused, a repeated claim) is renewed until released.
"""

from __future__ import annotations

import itertools
from collections import Counter
from unittest import mock

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from heartq.event_stream import EventStream
from heartq.events import Event
from heartq.lifecycle.fate import AttemptEnd, CommittedEnd, CrashedEnd
from heartq.model import ClaimedJob, Finish, Lease, Outcome
from heartq.worker import ledger as ledger_module
from heartq.worker.attempt import RunningJob, TransactionState
from heartq.worker.ledger import Ledger
from tests.support import examples

from .fakes import RecordingPool, attempt, job

CONCURRENCY = 3
UNSAVED = 2
"""`MAX_UNSAVED` for the model's ledger: small, so that examples reach the bound."""

ENDS = [
    AttemptEnd(Outcome.SUCCEEDED, result_json="1"),
    AttemptEnd(Outcome.FAILED, error="ValueError: boom"),
    AttemptEnd(Outcome.FAILED, error="StoreUnavailable: down", database_away=True),
    AttemptEnd(Outcome.TIMED_OUT, error="timed out after 1 s"),
    AttemptEnd(Outcome.CANCELLED, error="cancelled (forced)"),
    AttemptEnd(Outcome.CRASHED, error="killed", crash={"reason": "child exited"}),
    AttemptEnd(Outcome.RELEASED),
    AttemptEnd(Outcome.LOST, error="lease lost"),
]
ends = st.sampled_from(ENDS)
picks = st.integers(min_value=0, max_value=1_000)


def _claim_order(claimed: ClaimedJob) -> tuple[int, float, str]:
    return (-claimed.priority, claimed.run_at, claimed.id)


class LedgerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.heard: list[Event] = []
        stream = EventStream()
        stream.subscribe(self.heard.append)
        with mock.patch.object(ledger_module, "MAX_UNSAVED", UNSAVED):
            self.ledger = Ledger("w", CONCURRENCY, stream)
        self.pool = RecordingPool()
        self.ledger.pool = self.pool
        self.ids = itertools.count()
        # The model.
        self.runs: dict[Lease, RunningJob] = {}  # every attempt ever claimed
        self.code: set[Lease] = set()  # their code has not returned
        self.completed: set[Lease] = set()  # saved or dropped by the completer
        self.queued: Counter[Lease] = Counter()  # outcomes queued, ever
        self.inbox: list[tuple[RunningJob, object]] = []  # queued, not taken yet
        self.lost_before_end: set[Lease] = set()
        self.landed: set[Lease] = set()  # detaches landed (after the loss)
        self.untrusted: set[Lease] = set()
        self.buffer: dict[Lease, ClaimedJob] = {}
        self.give_back: dict[Lease, ClaimedJob] = {}

    # -- helpers -----------------------------------------------------------------------------
    def _lost_told(self) -> Counter[Lease]:
        """`lease_lost` told per attempt (not of jobs claimed ahead)."""
        return Counter(
            Lease(str(e.fields["job_id"]), int(e.fields["execution_id"]))
            for e in self.heard
            if e.name == "lease_lost" and not e.fields.get("claimed_ahead")
        )

    def _running(self) -> set[Lease]:
        return set(self.runs) - self.completed - set(self._lost_told())

    def _pick(self, leases: set[Lease], pick: int) -> RunningJob:
        ordered = sorted(leases, key=lambda x: (x.job_id, x.execution_id))
        return self.runs[ordered[pick % len(ordered)]]

    def _new_job(self, priority: int = 0, run_at: float = 0.0) -> ClaimedJob:
        return job(f"j{next(self.ids)}", priority=priority, run_at=run_at)

    def _take_outcomes(self) -> None:
        """What the ledger queued in the step just taken, into the completer's inbox."""
        while not self.ledger.outcomes.empty():
            item = self.ledger.outcomes.get_nowait()
            assert item is not None
            run, end = item
            assert run.ended is not None  # L2: queued once decided
            self.queued[run.job.lease] += 1
            self.inbox.append((run, end))
            if isinstance(end, Finish):  # L5
                assert run.job.lease not in self.lost_before_end
                assert run.transaction is not TransactionState.COMMITTED
                assert run.ended.outcome not in (Outcome.LOST, Outcome.CRASHED, Outcome.RELEASED)
                assert end.lease == run.job.lease
            elif isinstance(end, CommittedEnd):
                assert run.transaction is TransactionState.COMMITTED
            else:
                assert isinstance(end, CrashedEnd) and run.ended.outcome is Outcome.CRASHED

    def _decided_by(self, run: RunningJob, before: AttemptEnd | None, told: bool) -> None:
        """L2: the first end recorded stays; a later call changes nothing. An attempt
        whose task could not reach the database (its code not `told` of a cancel, its
        job not committed) is given back untrusted, its lease reported lost."""
        if before is not None:
            assert run.ended is before
        elif (
            run.ended is not None
            and run.ended.database_away
            and not told
            and run.transaction is not TransactionState.COMMITTED
        ):
            self.untrusted.add(run.job.lease)
            assert run.lost
        self._take_outcomes()

    # -- the fetch loop ----------------------------------------------------------------------
    @precondition(lambda self: self.ledger.free_slots() > 0)
    @rule(n=st.integers(min_value=1, max_value=3), again=st.booleans(), pick=picks)
    def claim(self, n: int, again: bool, pick: int) -> None:
        """Claim up to the free slots; `again`: one of them a new execution of a job this
        worker ran before (its old attempt may still linger)."""
        jobs = [self._new_job() for _ in range(min(n, self.ledger.free_slots()))]
        if again and self.runs:
            old = self._pick(set(self.runs), pick).job
            newest = max(x.execution_id for x in self.runs if x.job_id == old.id)
            jobs[0] = job(old.id, newest + 1)
        fresh = self.ledger.set_apart_repeats(jobs)
        assert fresh == jobs  # new leases: none is a repeat
        runs = [attempt(j) for j in fresh]
        self.ledger.claimed(*runs)
        for run in runs:
            self.runs[run.job.lease] = run
            self.code.add(run.job.lease)

    @precondition(lambda self: self.runs)
    @rule(pick=picks)
    def claim_repeated(self, pick: int) -> None:
        """The database hands over again a lease the worker may still hold: set apart and
        given back if it does (running, its code lingering, or untrusted), else a claim."""
        run = self._pick(set(self.runs), pick)
        lease = run.job.lease
        holds = lease in self._running() or lease in self.code or lease in self.untrusted
        fresh = self.ledger.set_apart_repeats([run.job])
        assert fresh == ([] if holds else [run.job])
        if holds:
            self.give_back[lease] = run.job

    @rule(jobs=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3)), min_size=1, max_size=4))
    def claim_ahead(self, jobs: list[tuple[int, int]]) -> None:
        claimed = [self._new_job(priority, float(run_at)) for priority, run_at in jobs]
        assert self.ledger.set_apart_repeats(claimed) == claimed
        free = self.ledger.free_slots()
        self.ledger.buffer(claimed)
        assert self.ledger.free_slots() == free  # L7: no slot taken
        self.buffer.update((j.lease, j) for j in claimed)

    @precondition(lambda self: self.buffer and self.ledger.free_slots() > 0)
    @rule(refused=st.lists(st.booleans(), min_size=3, max_size=3))
    def start_ahead(self, refused: list[bool]) -> None:
        """Start the best buffered jobs in the free slots; those whose start the database
        refused (a cancel requested meanwhile) are given back."""
        free = self.ledger.free_slots()
        taken = self.ledger.take_ahead(free)
        assert taken == sorted(self.buffer.values(), key=_claim_order)[:free]  # L7
        for j in taken:
            del self.buffer[j.lease]
        given = [j for j, no in zip(taken, refused, strict=False) if no]
        self.ledger.give_back(given)
        self.give_back.update((j.lease, j) for j in given)
        runs = [attempt(j) for j in taken if j not in given]
        self.ledger.claimed(*runs)
        for run in runs:
            self.runs[run.job.lease] = run
            self.code.add(run.job.lease)

    @precondition(lambda self: self.buffer or self.give_back)
    @rule(pick=picks, lose=st.booleans())
    def ahead_cancelled_or_lost(self, pick: int, lose: bool) -> None:
        every = {**self.buffer, **self.give_back}
        claimed = sorted(every.values(), key=lambda j: j.id)[pick % len(every)]
        if lose:
            self.ledger.lose_ahead(claimed, "reclaimed")
            self.buffer.pop(claimed.lease, None)
            self.give_back.pop(claimed.lease, None)
        else:
            self.ledger.cancel_ahead(claimed)
            if self.buffer.pop(claimed.lease, None) is not None:
                self.give_back[claimed.lease] = claimed

    @precondition(lambda self: self.give_back)
    @rule()
    def release_given_back(self) -> None:
        released = self.ledger.to_release()
        assert {j.lease for j in released} == set(self.give_back)  # L7
        self.ledger.released_ahead(released)
        self.give_back.clear()

    # -- the pools and the supervisor --------------------------------------------------------
    @precondition(lambda self: self.code)
    @rule(pick=picks, end=ends)
    def code_returns(self, pick: int, end: AttemptEnd) -> None:
        run = self._pick(self.code, pick)
        before, told = run.ended, run.cancel_requested
        self.ledger.slot_freed.clear()
        self.ledger.attempt_ended(run, end)
        self.code.discard(run.job.lease)
        assert self.ledger.slot_freed.is_set()  # L1: the freed slot wakes the fetch loop
        self._decided_by(run, before, told)

    @precondition(lambda self: self._running() | self.code)
    @rule(pick=picks, end=ends)
    def force(self, pick: int, end: AttemptEnd) -> None:
        run = self._pick(self._running() | self.code, pick)
        before, told, stops = run.ended, run.cancel_requested, len(self.pool.stopped)
        self.ledger.force(run, end)
        assert self.pool.stopped[stops:] == [run]  # the code is stopped, once
        if end.outcome is Outcome.CANCELLED:
            assert run.cancel_requested
        elif end.outcome is Outcome.LOST:
            assert run.lost
        else:
            assert run.cancel_requested  # stopping
        self._decided_by(run, before, told)

    @precondition(lambda self: self._running() | self.code)
    @rule(pick=picks)
    def lose(self, pick: int) -> None:
        run = self._pick(self._running() | self.code, pick)
        before, told = run.ended, run.cancel_requested
        if before is None:
            self.lost_before_end.add(run.job.lease)
        self.ledger.lose(run, "renewal refused")
        self.landed.discard(run.job.lease)  # due again
        assert run.lost and run.ended is not None
        self._decided_by(run, before, told)

    @precondition(lambda self: self._running())
    @rule(pick=picks)
    def request_cancel(self, pick: int) -> None:
        run = self._pick(self._running(), pick)
        self.ledger.request_cancel(run, grace=5.0)
        assert run.cancel_requested

    @precondition(
        lambda self: any(
            self.runs[x].ended is None and self.runs[x].transaction is TransactionState.NONE
            for x in self.code
        )
    )
    @rule(pick=picks)
    def task_commits(self, pick: int) -> None:
        """The task's own transaction completed its job (its end not decided yet)."""
        open_ = {
            x
            for x in self.code
            if self.runs[x].ended is None and self.runs[x].transaction is TransactionState.NONE
        }
        self._pick(open_, pick).mark_committed()

    # -- the heartbeater ---------------------------------------------------------------------
    @precondition(lambda self: self._running())
    @rule(pick=picks)
    def mark_untrusted(self, pick: int) -> None:
        run = self._pick(self._running(), pick)
        self.ledger.mark_untrusted(run)
        self.untrusted.add(run.job.lease)

    @precondition(lambda self: self.untrusted)
    @rule(pick=picks)
    def given_back_untrusted(self, pick: int) -> None:
        run = self._pick(self.untrusted, pick)
        self.ledger.forget_untrusted(run)
        self.untrusted.discard(run.job.lease)

    @rule()
    def heartbeat_lands(self) -> None:
        detached = self.ledger.to_detach()
        self.ledger.detach_landed(detached)
        self.landed.update(detached)

    # -- the completer -----------------------------------------------------------------------
    @precondition(lambda self: self.inbox)
    @rule(lost=st.lists(st.booleans(), min_size=4, max_size=4))
    def completer_saves(self, lost: list[bool]) -> None:
        """The completer takes what is queued: each saved, or found lost (a finish the
        store refused); a crash it records is dropped."""
        taken, self.inbox = self.inbox, []
        saved = []
        for (run, end), refused in zip(taken, itertools.cycle(lost), strict=False):
            if isinstance(end, CrashedEnd):  # recorded (or found lost meanwhile)
                self.ledger.drop(run)
                self.completed.add(run.job.lease)
            elif refused:
                self.ledger.lose(run, "result refused: the job was reclaimed")
                self.landed.discard(run.job.lease)  # due again
                self._take_outcomes()
            else:
                saved.append(run)
                self.completed.add(run.job.lease)
        self.ledger.saved(saved)

    # -- the invariants ----------------------------------------------------------------------
    @invariant()
    def slots(self) -> None:  # L1
        running = self._running()
        assert {r.job.lease for r in self.ledger.running()} == running
        assert self.ledger.executing() == len(self.code)
        by_code = CONCURRENCY - len(self.code)
        by_unsaved = CONCURRENCY + UNSAVED - len(running)
        assert self.ledger.free_slots() == max(0, min(by_code, by_unsaved))

    @invariant()
    def decided_once_and_queued_at_once(self) -> None:  # L2, L3
        lost = self._lost_told()
        undecided = {x for x in self.code if self.runs[x].ended is None}
        assert self.ledger.undecided() == len(undecided)
        assert {r.job.lease for r in self.ledger.abandoned()} == self.code - undecided
        for lease, run in self.runs.items():
            assert self.queued[lease] <= 1, run
            if run.ended is None:
                continue
            released = run.ended.outcome is Outcome.RELEASED
            committed = run.transaction is TransactionState.COMMITTED
            assert self.queued[lease] + lost[lease] >= 1 or (released and not committed), run

    @invariant()
    def lost_told_once_and_detached(self) -> None:  # L4
        for lease, count in self._lost_told().items():
            assert count == 1, lease
            assert self.runs[lease].lost
            assert (lease in self.ledger.to_detach()) != (lease in self.landed)

    @invariant()
    def held(self) -> None:  # L6
        expected = {
            x
            for x in self._running()
            if not self.runs[x].lost and self.runs[x].transaction is not TransactionState.COMMITTED
        }
        assert {r.job.lease for r in self.ledger.held()} == expected

    @invariant()
    def buffer(self) -> None:  # L7
        assert self.ledger.buffered() == len(self.buffer)
        ahead = self.ledger.ahead()
        assert ahead[: len(self.buffer)] == sorted(self.buffer.values(), key=_claim_order)
        assert {j.lease for j in ahead[len(self.buffer) :]} == set(self.give_back)
        assert {j.lease for j in self.ledger.to_release()} == set(self.give_back)
        assert {r.job.lease for r in self.ledger.untrusted()} == self.untrusted


LedgerMachine.TestCase.settings = settings(
    max_examples=examples(50, thorough=150),
    stateful_step_count=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_the_ledger_holds_its_rules_under_any_order_of_events = LedgerMachine.TestCase
