"""The ledger counts a slot as used from an attempt's start until its pool reports that
the attempt's code ended, whoever decided the end: a forced end (timeout, forced cancel,
lost lease) queues its outcome at once but keeps the slot while the code lingers."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from typing import Any

import heartq
from heartq.context import JobContext
from heartq.event_stream import EventStream
from heartq.lifecycle.fate import AttemptEnd
from heartq.model import ClaimedJob, Outcome
from heartq.worker.attempt import RunningJob
from heartq.worker.ledger import MAX_UNSAVED, Ledger
from heartq.worker.pools import AsyncPool
from tests.support import wait_for

tasks = heartq.App()
entered = threading.Event()
cancel_seen = threading.Event()
let_go = threading.Event()
ticks = [0]  # how often the cancelled coroutine looked at `let_go`


@tasks.task
async def swallows_its_cancel(ctx: JobContext) -> str:
    """Swallows the pool's cancel and goes on until the test lets it go."""
    entered.set()
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        cancel_seen.set()
    while not let_go.is_set():
        ticks[0] += 1
        await asyncio.sleep(0.01)
    return "late"


class StubbornPool:
    """A pool whose code cannot be stopped (the thread pool's case): it only records the
    stops; the test reports each attempt's end itself, as the pool's thread would."""

    ends_timeouts = False

    def __init__(self) -> None:
        self.stopped: list[RunningJob] = []

    def start(self, runs: Sequence[RunningJob]) -> None: ...

    def stop(self, run: RunningJob) -> None:
        self.stopped.append(run)

    def notify(self, run: RunningJob) -> None: ...

    def close(self) -> None: ...


def attempt(job_id: str, execution_id: int = 1, task: Any = None) -> RunningJob:
    job = ClaimedJob(
        id=job_id,
        task=task.name if task else "t",
        queue="default",
        args={},
        attempt=execution_id,
        execution_id=execution_id,
        max_retries=3,
        retry_backoff=0.0,
        retry_backoff_max=0.0,
        checkpoint=None,
        lease_expires_at=0.0,
    )
    return RunningJob(
        job, task, None,  # type: ignore[arg-type]  # no store: nothing here saves
        claim_sent_at=time.monotonic(), trust_window=60.0, max_payload_bytes=1 << 20,
    )  # fmt: skip


def ledger_with(*runs: RunningJob, concurrency: int = 2) -> tuple[Ledger, StubbornPool]:
    ledger = Ledger("w", concurrency, EventStream())
    pool = StubbornPool()
    ledger.pool = pool
    ledger.claimed(*runs)
    return ledger, pool


def queued(ledger: Ledger) -> list[tuple[str, int]]:
    """The outcomes handed to the completer so far (job id, execution id)."""
    out = []
    while not ledger.outcomes.empty():
        item = ledger.outcomes.get_nowait()
        assert item is not None
        out.append((item[0].job.id, item[0].job.execution_id))
    return out


def test_a_forced_end_queues_its_outcome_at_once_but_keeps_the_slot_until_the_code_returns():
    hung, other = attempt("hung"), attempt("other")
    ledger, pool = ledger_with(hung, other)
    assert (ledger.executing(), ledger.free_slots()) == (2, 0)

    ledger.force(hung, AttemptEnd(Outcome.TIMED_OUT, error="timed out after 1 s"))
    assert queued(ledger) == [("hung", 1)]  # decided, and queued, at once
    assert pool.stopped == [hung]
    assert ledger.executing() == 2 and ledger.free_slots() == 0  # its code still runs ...
    assert ledger.undecided() == 1  # ... though a shutdown no longer waits for it
    assert ledger.abandoned() == [hung]
    ledger.slot_freed.clear()

    # Its code returns at last (a success it is too late for): stale, yet the slot frees.
    ledger.attempt_ended(hung, AttemptEnd(Outcome.SUCCEEDED, result_json="1"))
    assert queued(ledger) == []  # the first end counted; nothing is queued twice
    assert hung.ended is not None and hung.ended.outcome is Outcome.TIMED_OUT
    assert ledger.slot_freed.is_set()
    assert (ledger.executing(), ledger.free_slots(), ledger.abandoned()) == (1, 1, [])

    ledger.attempt_ended(other, AttemptEnd(Outcome.SUCCEEDED, result_json="2"))
    assert queued(ledger) == [("other", 1)]
    assert (ledger.executing(), ledger.undecided(), ledger.abandoned()) == (0, 0, [])


def test_a_cancel_and_a_lost_lease_linger_the_same_way():
    cancelled, lost = attempt("cancelled"), attempt("lost")
    ledger, _ = ledger_with(cancelled, lost)
    ledger.force(cancelled, AttemptEnd(Outcome.CANCELLED, error="cancelled (forced)"))
    ledger.lose(lost, "renewal refused: the job was reclaimed")
    assert queued(ledger) == [("cancelled", 1)]  # a lost attempt reports nothing
    assert ledger.running() == [cancelled]  # the lost one is forgotten at once ...
    assert ledger.free_slots() == 0 and ledger.undecided() == 0  # ... its code is not
    assert {r.job.id for r in ledger.abandoned()} == {"cancelled", "lost"}
    for run in (lost, cancelled):
        ledger.attempt_ended(run, AttemptEnd(Outcome.FAILED, error="ignored"))
    assert (ledger.free_slots(), ledger.abandoned(), queued(ledger)) == (2, [], [])


def test_each_attempt_frees_its_slot_once_whoever_ended_it_first():
    returned, forced = attempt("job", 1), attempt("job", 2)  # two attempts of one job
    ledger, _ = ledger_with(returned, forced, concurrency=3)
    ledger.attempt_ended(returned, AttemptEnd(Outcome.SUCCEEDED, result_json="1"))
    # The worker's force lost the race to the code's own end: nothing lingers.
    ledger.force(returned, AttemptEnd(Outcome.TIMED_OUT, error="late"))
    assert ledger.abandoned() == [] and ledger.executing() == 1
    ledger.attempt_ended(returned, AttemptEnd(Outcome.SUCCEEDED, result_json="1"))  # again
    assert ledger.executing() == 1  # never below what really runs
    ledger.force(forced, AttemptEnd(Outcome.RELEASED))
    assert ledger.executing() == 1
    assert ledger.abandoned() == [forced] and ledger.undecided() == 0
    ledger.attempt_ended(forced, AttemptEnd(Outcome.SUCCEEDED, result_json="2"))
    assert (ledger.executing(), ledger.free_slots()) == (0, 3)
    assert queued(ledger) == [("job", 1)]  # a release is not the completer's


def test_claims_stop_while_too_many_ended_attempts_wait_for_their_outcomes_to_be_saved():
    """A slot frees when the code returns; the outcome is saved later. A worker whose
    saves fall behind (a slow finish statement) must not claim on at its code's speed:
    past `concurrency + MAX_UNSAVED` attempts held, it has no free slot, and the save
    that brings it back under the bound wakes the fetch loop."""
    ledger, _ = ledger_with(concurrency=2)
    runs = [attempt(f"j{i}") for i in range(2 + MAX_UNSAVED)]
    for run in runs:  # each one claimed into a free slot, its code returns at once
        assert ledger.free_slots() > 0
        ledger.claimed(run)
        ledger.attempt_ended(run, AttemptEnd(Outcome.SUCCEEDED, result_json="null"))
    assert ledger.executing() == 0  # no code runs ...
    assert ledger.free_slots() == 0  # ... yet nothing more may be claimed
    assert len(queued(ledger)) == 2 + MAX_UNSAVED  # every outcome waits for the completer
    ledger.slot_freed.clear()
    ledger.saved([runs[0]])
    assert ledger.slot_freed.is_set() and ledger.free_slots() == 1
    ledger.slot_freed.clear()
    ledger.saved([runs[1]])
    assert not ledger.slot_freed.is_set()  # woken once, when it got back under the bound
    assert ledger.free_slots() == 2  # never more than the slots


def test_the_async_pool_frees_the_slot_when_the_cancelled_coroutine_really_finishes():
    run = attempt("swallow", task=swallows_its_cancel)
    ledger = Ledger("w", 1, EventStream())
    pool = AsyncPool(ledger, 1 << 20)
    ledger.pool = pool
    try:
        ledger.claimed(run)
        pool.start([run])
        wait_for(entered.is_set, what="the coroutine to run")
        ledger.force(run, AttemptEnd(Outcome.TIMED_OUT, error="timed out after 1 s"))
        wait_for(cancel_seen.is_set, what="the coroutine to be cancelled")
        pool.stop(run)  # a forced end reaches the pool more than once: it cancels once
        seen = ticks[0]
        wait_for(lambda: ticks[0] >= seen + 2, what="the loop to pass the second stop")
        assert queued(ledger) == [("swallow", 1)]
        assert (ledger.executing(), ledger.free_slots()) == (1, 0)  # it swallowed the cancel
        assert ledger.abandoned() == [run]
        let_go.set()
        wait_for(lambda: ledger.executing() == 0, what="the coroutine to finish")
        assert ledger.abandoned() == [] and queued(ledger) == []
        assert run.ended is not None and run.ended.outcome is Outcome.TIMED_OUT
    finally:
        let_go.set()
        pool.close()


def test_a_new_attempt_wakes_the_supervisor_only_for_a_deadline_before_its_next_pass() -> None:
    """The supervisor passes over every attempt at least every `supervisor_passes_within`
    seconds: a claimed attempt whose deadlines all come later needs no wake-up (one per
    claim was a tenth of a busy worker's time); one with an earlier deadline (a short
    timeout, a short trust window) wakes it at once."""
    ledger = Ledger("w", 4, EventStream())
    ledger.supervisor_passes_within = 1.0
    ledger.claimed(attempt("no-timeout"))  # trust window 60 s, no timeout
    assert not ledger.deadlines_changed.is_set()

    short = attempt("short-timeout")
    short.deadline = time.monotonic() + 0.5
    ledger.claimed(short)
    assert ledger.deadlines_changed.is_set()

    ledger.deadlines_changed.clear()
    untrusted = attempt("short-trust")
    untrusted.trusted_until = time.monotonic() + 0.5
    ledger.claimed(untrusted)
    assert ledger.deadlines_changed.is_set()

    ledger.deadlines_changed.clear()
    unset = Ledger("w", 4, EventStream())  # a ledger no supervisor set: every attempt wakes
    unset.claimed(attempt("any"))
    assert unset.deadlines_changed.is_set()
