"""The claimer's bookkeeping (`heartq.worker.claimer`; no database, no thread): what it
asks the store for, what it starts, buffers and gives back, and how long an idle fetch
loop sleeps. The store is `tests/unit/fakes.py`'s; the fetch strategies under random
rounds are `test_fetch_machine.py`'s.
"""

from __future__ import annotations

import time

import pytest

from heartq.model import Finish, JobStatus, Outcome, TaskPolicy
from heartq.worker.claimer import (
    CLAIM_RETRY_DELAY,
    RATE_WAKE_MARGIN,
    RATE_WAKE_MIN,
    ClaimAheadFetch,
    ClaimFetch,
    Round,
)

from .fakes import DOWN, LEASE, SETTINGS, Heard, drain_outcomes, parts


# -- one claim ----------------------------------------------------------------------------
def test_a_claim_asks_for_the_slots_free_once_it_has_the_database_in_hand() -> None:
    """The free slots go to the store as a callable, read inside its write: a slot freed
    while the claim waited for the database (SQLite's write lock behind a finish) is
    filled by this claim."""
    p = parts(concurrency=3, queues=("a", "b"))
    p.store.enqueue("x", "y", "z", "w")
    p.claimer.claim(for_slots=True, ahead=0)
    p.store.enqueue("late")
    p.store.on_claim = lambda: p.end("x")  # frees a slot while the claim waits
    p.claimer.claim(for_slots=True, ahead=0)
    assert [(c.queues, c.slots, c.ahead, c.lease) for c in p.store.claims] == [
        (("a", "b"), 3, 0, LEASE), (("a", "b"), 1, 0, LEASE),
    ]  # fmt: skip


def test_what_a_claim_took_starts_on_the_pool_in_one_batch() -> None:
    p = parts(concurrency=3)
    p.store.enqueue("a", "b")
    claimed = p.claimer.claim(for_slots=True, ahead=0)
    assert claimed is not None and [j.id for j in claimed] == ["a", "b"]
    assert [[r.job.id for r in batch] for batch in p.pool.started] == [["a", "b"]]
    assert p.ledger.executing() == 2 and p.ledger.free_slots() == 1
    assert {r.job.lease for r in p.ledger.running()} == set(p.store.running)


def test_a_claim_ahead_only_buffers_best_first_and_starts_nothing() -> None:
    p = parts()
    p.store.enqueue("low", priority=0)
    p.store.enqueue("high", priority=3)
    claimed = p.claimer.claim(for_slots=False, ahead=5)
    assert claimed is not None and list(claimed) == []
    assert p.store.claims[-1].slots == 0 and p.store.claims[-1].ahead == 5
    assert [j.id for j in p.ledger.ahead()] == ["high", "low"]
    assert p.pool.started == [] and p.ledger.executing() == 0


def test_an_attempt_is_trusted_from_when_its_claim_was_sent() -> None:
    """From the later of the claimer's clock before the call and the store's own
    `sent_at` (after any wait for a connection or a lock)."""
    p = parts()
    p.store.enqueue("a")
    before = time.monotonic()
    p.claimer.claim(for_slots=True, ahead=0)
    [run] = p.ledger.running()
    assert run.job.sent_at >= before
    assert run.trusted_until == run.job.sent_at + SETTINGS.trust_window


def test_a_claimed_job_takes_the_workers_own_policy_for_what_its_caller_left() -> None:
    p = parts()
    p.app.task(name="patient", max_retries=9)(lambda: None)
    p.store.enqueue("a", task="patient")  # stored with 3 retries, none chosen
    p.claimer.claim(for_slots=True, ahead=0)
    [run] = p.ledger.running()
    assert run.job.max_retries == 9 and run.task is p.app.tasks["patient"]


def test_a_failed_claim_sweeps_goes_again_at_once_and_pauses_only_after_another(
    heard: Heard,
) -> None:
    """The first failure after a claim that went well (most often its connection ended
    under it) is tried again at once; a failure after a failure pauses
    `CLAIM_RETRY_DELAY`: the database is away. Each may have committed with its answer
    lost, so the next heartbeat sweeps; the database's state is told once, at the second
    failure in a row (one connection ended under a claim is not the database away)."""
    p = parts(heard=heard)
    p.store.fail("claim", DOWN, DOWN)
    assert p.claimer.claim(for_slots=True, ahead=0) is None
    assert p.ledger.take_sweep() and p.stop.waits == []
    assert heard.names().count("store_unavailable") == 0
    assert p.claimer.claim(for_slots=True, ahead=0) is None
    assert p.ledger.take_sweep() and p.stop.waits == [CLAIM_RETRY_DELAY]
    assert heard.names().count("claim_failed") == 2
    assert heard.names().count("store_unavailable") == 1
    p.store.enqueue("a")
    claimed = p.claimer.claim(for_slots=True, ahead=0)
    assert claimed is not None and [j.id for j in claimed] == ["a"]
    assert heard.names().count("store_recovered") == 1
    p.store.fail("claim", DOWN)
    assert p.claimer.claim(for_slots=True, ahead=0) is None
    assert p.stop.waits == [CLAIM_RETRY_DELAY]  # after one that went well: at once again


def test_a_claim_that_may_have_taken_more_than_it_says_sweeps() -> None:
    p = parts()
    p.store.unanswered = True
    p.claimer.claim(for_slots=True, ahead=3)
    assert p.ledger.take_sweep()


def test_a_repeated_claim_of_a_lease_held_is_given_back_at_once_unstarted(heard: Heard) -> None:
    p = parts(concurrency=3, heard=heard)
    p.store.enqueue("a")
    p.claimer.claim(for_slots=True, ahead=0)
    [held] = p.ledger.running()
    p.store.repeats = [held.job]  # a database that forgot the claim hands it over again
    p.store.enqueue("b")
    p.claimer.claim(for_slots=True, ahead=0)
    assert p.pool.ids() == ["a", "b"]  # not started twice
    assert p.store.released == [held.job.lease] and p.ledger.to_release() == []
    assert heard.names().count("claim_repeated") == 1


# -- jobs of tasks this worker does not know ---------------------------------------------
@pytest.mark.parametrize(
    ("declared", "read_fails", "status"),
    [
        (True, False, JobStatus.QUEUED),
        (False, False, JobStatus.DEAD),
        (False, True, JobStatus.QUEUED),
    ],
    ids=["declared-elsewhere", "declared-nowhere", "could-not-tell"],
)
def test_a_job_of_an_unknown_task_runs_nothing_and_is_decided_by_its_declaration(
    declared: bool, read_fails: bool, status: JobStatus
) -> None:
    """Waits for a worker that knows its task (given back, not counted) if some worker
    declared it, or if the read failed (nothing is buried on a guess); dead at once if
    none did. One read for the claim's batch."""
    p = parts(concurrency=3)
    if declared:
        p.store.declared["gone"] = TaskPolicy("gone", "default", 0, 3, 1.0, 60.0)
    if read_fails:
        p.store.fail("task_policies", DOWN)
    p.store.enqueue("x", "y", task="gone")
    p.store.enqueue("known", task="t")
    p.claimer.claim(for_slots=True, ahead=0)
    assert p.pool.ids() == ["known"]
    assert p.store.calls.count("task_policies") == 1
    ended = drain_outcomes(p.ledger)
    assert sorted(run.job.id for run, _ in ended) == ["x", "y"]
    for _, finish in ended:
        assert isinstance(finish, Finish) and finish.status is status
        waits = status is JobStatus.QUEUED
        assert finish.outcome is (Outcome.RELEASED if waits else Outcome.FAILED)
    assert p.ledger.executing() == 1  # their slots freed at once


# -- the buffer -----------------------------------------------------------------------------
def test_starting_ahead_records_the_start_of_the_best_first_then_runs_them() -> None:
    p = parts(concurrency=2)
    for i, priority in enumerate([0, 5, 1]):
        p.store.enqueue(f"p{priority}", priority=priority, run_at=float(i))
    p.claimer.claim(for_slots=False, ahead=3)
    assert p.claimer.start_ahead(2) == 2
    assert p.store.calls[-1] == "start_ahead"
    assert p.pool.ids() == ["p5", "p1"]
    assert [j.id for j in p.ledger.ahead()] == ["p0"]
    assert {r.job.lease for r in p.ledger.running()} == set(p.store.running)


def test_a_buffered_job_whose_start_was_refused_never_runs_and_is_given_back(
    heard: Heard,
) -> None:
    p = parts(concurrency=2, heard=heard)
    p.store.enqueue("cancelled", "kept")
    p.claimer.claim(for_slots=False, ahead=2)
    p.store.refuse_start = {"cancelled"}
    assert p.claimer.start_ahead(2) == 1
    assert p.pool.ids() == ["kept"]
    [given_back] = p.ledger.to_release()
    p.claimer.release_given_back()  # the next round's first step
    assert p.store.released == [given_back.lease] and p.ledger.ahead() == []
    assert [f["job_id"] for f in heard.of("job_released")] == ["cancelled"]


def test_a_start_ahead_that_failed_keeps_the_jobs_buffered_in_order() -> None:
    p = parts(concurrency=2)
    p.store.enqueue("a", "b", "c")
    p.claimer.claim(for_slots=False, ahead=3)
    p.store.fail("start_ahead", DOWN)
    assert p.claimer.start_ahead(2) == -1
    assert [j.id for j in p.ledger.ahead()] == ["a", "b", "c"] and p.pool.started == []
    assert p.ledger.take_sweep() and p.stop.waits == []  # a first failure: at once
    assert p.claimer.start_ahead(2) == 2 and p.pool.ids() == ["a", "b"]


def test_a_release_tells_what_it_gave_back_and_keeps_what_it_could_not(heard: Heard) -> None:
    p = parts(heard=heard)
    p.store.enqueue("a", "b")
    p.claimer.claim(for_slots=False, ahead=2)
    a, b = p.ledger.ahead()
    p.ledger.give_back([a, b])
    p.store.fail("release", DOWN)
    assert p.claimer.release_ahead([a, b]) is None
    assert p.ledger.to_release() == [a, b]  # retried at the next pass
    p.store.reclaim("b")  # its lease ran out meanwhile
    assert p.claimer.release_ahead([a, b]) == 1
    assert p.ledger.to_release() == [] and p.ledger.ahead() == []
    assert [f.get("job_id") for f in heard.of("job_released")] == [None, "a"]


# -- how long an idle loop sleeps ------------------------------------------------------------
@pytest.mark.parametrize(
    ("rate_wait", "idle"),
    [
        (None, 1.0),
        (0.3, 0.3 + RATE_WAKE_MARGIN),
        (0.0, RATE_WAKE_MIN),  # "now": another claimer held the key, no tight loop
        (5.0, 1.0),  # never past the poll
    ],
)
def test_an_idle_loop_wakes_just_after_a_rate_limited_start_frees_up(
    rate_wait: float | None, idle: float
) -> None:
    assert parts().claimer.idle_wait(rate_wait) == pytest.approx(idle)


# -- the fetch strategies, one round at a time -----------------------------------------------
def test_a_round_without_a_free_slot_asks_the_store_for_nothing() -> None:
    p = parts(concurrency=1)
    p.store.enqueue("a", "b")
    fetch = ClaimFetch(p.claimer, p.ledger)
    assert fetch.round(burst=False) == Round(claimed=1, busy=True, idle=1.0)
    assert fetch.round(burst=False) == Round(claimed=0, busy=False, idle=1.0)
    assert p.store.calls == ["claim"]


def test_a_round_that_did_not_fill_its_slots_sleeps_until_a_rate_limited_start() -> None:
    p = parts(concurrency=3)
    p.store.enqueue("a")
    p.store.rate_wait = 0.2
    fetch = ClaimFetch(p.claimer, p.ledger)
    assert fetch.round(burst=False) == Round(
        claimed=1, busy=False, rate_wait=0.2, idle=0.2 + RATE_WAKE_MARGIN
    )


def test_a_round_whose_claim_failed_goes_round_again_without_the_poll() -> None:
    """Not busy, and no sleep of the poll interval: the next round claims again (the
    claimer paused first if it must)."""
    p = parts()
    p.store.fail("claim", DOWN)
    assert ClaimFetch(p.claimer, p.ledger).round(burst=True) == Round(claimed=0, idle=None)


def test_every_round_first_gives_back_what_waits_to_be_given_back() -> None:
    p = parts(concurrency=1)
    p.store.enqueue("a", "b")
    p.claimer.claim(for_slots=False, ahead=1)
    p.ledger.give_back(p.ledger.ahead())
    ClaimFetch(p.claimer, p.ledger).round(burst=False)
    assert p.store.calls == ["claim", "release", "claim"]


def test_claiming_ahead_starts_from_the_buffer_and_refills_it_only_at_half() -> None:
    """With `prefetch` 4 and 2 slots: the first round claims for the slots and 4 ahead;
    a freed slot takes the best buffered job and claims nothing while the buffer holds
    more than half; once it is down to half, a claim tops it up to 4."""
    p = parts(concurrency=2)
    p.store.enqueue(*[f"j{i}" for i in range(10)])
    fetch = ClaimAheadFetch(p.claimer, p.ledger, prefetch=4)
    assert fetch.round(burst=False).claimed == 6
    assert [(c.slots, c.ahead) for c in p.store.claims] == [(2, 4)]
    assert p.pool.ids() == ["j0", "j1"] and p.ledger.buffered() == 4

    p.end("j0")
    assert fetch.round(burst=False) == Round(claimed=1, busy=True, idle=1.0)
    assert p.pool.ids()[-1] == "j2" and len(p.store.claims) == 1  # 3 left: above half

    p.end("j1")
    assert fetch.round(burst=False).claimed == 3  # started j3; 2 left, topped up by 2
    assert p.pool.ids()[-1] == "j3"
    assert [(c.slots, c.ahead) for c in p.store.claims][-1] == (0, 2)
    assert p.ledger.buffered() == 4


def test_claiming_ahead_claims_for_the_slots_the_buffer_could_not_fill() -> None:
    """Free slots left after the buffer's starts (two of three starts refused: their
    cancels were requested) are claimed for at once, however full the buffer still is."""
    p = parts(concurrency=3)
    p.store.enqueue(*[f"j{i}" for i in range(8)])
    p.claimer.claim(for_slots=False, ahead=8)
    p.store.refuse_start = {"j1", "j2"}
    p.store.enqueue("new")
    fetch = ClaimAheadFetch(p.claimer, p.ledger, prefetch=8)
    fetch.round(burst=False)
    assert p.ledger.buffered() >= 5  # above half
    assert [(c.slots, c.ahead) for c in p.store.claims][-1] == (2, 3)
    assert p.pool.ids() == ["j0", "new"]


def test_claiming_ahead_goes_on_as_after_a_failed_claim_when_the_start_failed() -> None:
    p = parts()
    p.store.enqueue("a")
    p.claimer.claim(for_slots=False, ahead=1)
    p.store.fail("start_ahead", DOWN)
    fetch = ClaimAheadFetch(p.claimer, p.ledger, prefetch=2)
    assert fetch.round(burst=False) == Round()
    assert p.store.calls == ["claim", "start_ahead"]
