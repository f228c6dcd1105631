"""The ledger's transitions, one at a time (`heartq.worker.ledger`; no database, no thread).

Each test drives one transition of an attempt's lease as the worker's parts do (the
fetch loop claims, a pool reports an end, the supervisor forces one, the heartbeater
loses or cancels, the completer saves) and checks the rule the module's docstring states
for it. `test_ledger_machine.py` runs them all in random order against a model.
"""

from __future__ import annotations

from heartq.event_stream import EventStream
from heartq.lifecycle.fate import AttemptEnd, CommittedEnd, CrashedEnd
from heartq.model import Finish, JobStatus, Outcome
from heartq.worker.attempt import TransactionState
from heartq.worker.ledger import Ledger

from .fakes import Heard, RecordingPool, attempt, decided, drain_outcomes, job

SUCCESS = AttemptEnd(Outcome.SUCCEEDED, result_json='"ok"')
FAILURE = AttemptEnd(Outcome.FAILED, error="ValueError: boom")


def ledger_with_pool(
    concurrency: int = 2, heard: Heard | None = None
) -> tuple[Ledger, RecordingPool]:
    """A ledger whose events `heard` hears, and its pool."""
    ledger = Ledger("w", concurrency, heard.stream if heard is not None else EventStream())
    pool = RecordingPool()
    ledger.pool = pool
    return ledger, pool


# -- claimed, then ended by its code --------------------------------------------------------
def test_a_claimed_attempt_takes_a_slot_and_is_undecided_and_held() -> None:
    ledger, pool = ledger_with_pool(concurrency=3)
    run = attempt("a")
    ledger.claimed(run)
    assert (ledger.executing(), ledger.free_slots(), ledger.undecided()) == (1, 2, 1)
    assert ledger.running() == [run] and ledger.held() == [run]
    assert ledger.abandoned() == []
    run.mark_cancel_requested()  # its flags reach its pool, which tells the code
    assert pool.notified == [run]


def test_an_end_of_its_code_is_decided_queued_and_frees_the_slot() -> None:
    ledger, _ = ledger_with_pool()
    run = attempt("a")
    ledger.claimed(run)
    ledger.slot_freed.clear()
    ledger.attempt_ended(run, SUCCESS)
    [(queued, finish)] = drain_outcomes(ledger)
    assert queued is run and isinstance(finish, Finish)
    assert (finish.outcome, finish.status, finish.result_json) == (
        Outcome.SUCCEEDED, JobStatus.SUCCEEDED, '"ok"',
    )  # fmt: skip
    assert ledger.slot_freed.is_set()
    assert (ledger.executing(), ledger.undecided(), ledger.free_slots()) == (0, 0, 2)
    assert ledger.running() == [run]  # until the completer saved it


def test_the_first_end_wins_and_a_later_one_queues_nothing() -> None:
    ledger, _ = ledger_with_pool()
    run = attempt("a")
    ledger.claimed(run)
    ledger.attempt_ended(run, FAILURE)
    ledger.attempt_ended(run, SUCCESS)  # a pool that reported twice
    ledger.force(run, AttemptEnd(Outcome.TIMED_OUT, error="late"))
    [(_, finish)] = drain_outcomes(ledger)
    assert finish.outcome is Outcome.FAILED
    assert run.ended is FAILURE
    assert ledger.executing() == 0  # never below what really runs


def test_a_success_after_the_code_was_told_of_a_cancel_ends_cancelled() -> None:
    ledger, _ = ledger_with_pool()
    run = attempt("a")
    ledger.claimed(run)
    ledger.request_cancel(run, grace=5.0)
    ledger.attempt_ended(run, SUCCESS)
    [(_, finish)] = drain_outcomes(ledger)
    assert (finish.outcome, finish.status) == (Outcome.CANCELLED, JobStatus.CANCELLED)


def test_a_failure_after_a_cancel_request_counts_as_cancelled() -> None:
    ledger, _ = ledger_with_pool()
    run = attempt("a")
    ledger.claimed(run)
    ledger.request_cancel(run, grace=5.0)
    ledger.attempt_ended(run, FAILURE)
    [(_, finish)] = drain_outcomes(ledger)
    assert finish.status is JobStatus.CANCELLED


# -- forced by the worker -----------------------------------------------------------------
def test_a_forced_end_is_queued_at_once_and_keeps_the_slot_until_the_code_returns() -> None:
    ledger, pool = ledger_with_pool()
    run = attempt("a")
    ledger.claimed(run)
    ledger.force(run, AttemptEnd(Outcome.TIMED_OUT, error="timed out after 1 s"))
    [(_, finish)] = drain_outcomes(ledger)
    assert finish.outcome is Outcome.TIMED_OUT
    assert pool.stopped == [run]
    assert run.cancel_requested and not run.lost  # stopping: its outcome is still saved
    assert (ledger.executing(), ledger.undecided(), ledger.abandoned()) == (1, 0, [run])
    ledger.slot_freed.clear()
    ledger.attempt_ended(run, SUCCESS)  # the code returns at last: stale
    assert drain_outcomes(ledger) == []
    assert ledger.slot_freed.is_set() and ledger.abandoned() == []


def test_a_forced_cancel_tells_the_code_its_cancel_was_requested() -> None:
    ledger, _ = ledger_with_pool()
    run = attempt("a")
    ledger.claimed(run)
    ledger.force(run, AttemptEnd(Outcome.CANCELLED, error="cancelled (forced)"))
    assert run.cancel_requested and not run.lost
    [(_, finish)] = drain_outcomes(ledger)
    assert finish.status is JobStatus.CANCELLED


def test_a_forced_end_that_came_too_late_still_stops_the_code() -> None:
    ledger, pool = ledger_with_pool()
    run = attempt("a")
    ledger.claimed(run)
    ledger.attempt_ended(run, SUCCESS)
    ledger.force(run, AttemptEnd(Outcome.TIMED_OUT, error="late"))
    assert pool.stopped == [run]
    assert len(drain_outcomes(ledger)) == 1


def test_a_release_is_decided_but_not_the_completers() -> None:
    """Shutdown releases the attempts it gives back together: nothing is queued, and the
    attempt stays in the ledger for that release."""
    ledger, _ = ledger_with_pool()
    run = attempt("a")
    ledger.claimed(run)
    ledger.force(run, AttemptEnd(Outcome.RELEASED))
    assert drain_outcomes(ledger) == []
    assert ledger.undecided() == 0 and ledger.running() == [run]


# -- where each end goes --------------------------------------------------------------------
def test_a_crash_goes_to_the_completer_as_the_stores_to_decide() -> None:
    ledger, _ = ledger_with_pool()
    crash = {"reason": "child exited", "exit_code": -9}
    decided(ledger, AttemptEnd(Outcome.CRASHED, error="killed", crash=crash), attempt())
    [(_, end)] = drain_outcomes(ledger)
    assert isinstance(end, CrashedEnd) and end.end.crash == crash


def test_a_job_its_transaction_completed_goes_to_the_completer_for_its_result() -> None:
    ledger, _ = ledger_with_pool()
    run = attempt("a")
    ledger.claimed(run)
    run.mark_committed()
    assert ledger.held() == []  # the job is done: nothing to renew
    ledger.attempt_ended(run, FAILURE)  # its code failed after the commit
    [(_, end)] = drain_outcomes(ledger)
    assert isinstance(end, CommittedEnd) and end.end is FAILURE


def test_a_task_that_could_not_reach_the_database_is_given_back_untrusted() -> None:
    """Not the job's failure (`database_away`): the attempt is given back as untrusted
    once the database answers, its lease reported lost and detached."""
    ledger, _ = ledger_with_pool()
    run = attempt("a")
    ledger.claimed(run)
    ledger.newly_untrusted.clear()
    ledger.attempt_ended(run, AttemptEnd(Outcome.FAILED, error="down", database_away=True))
    assert drain_outcomes(ledger) == []
    assert ledger.untrusted() == [run] and ledger.newly_untrusted.is_set()
    assert run.untrusted_reason == "its task could not reach the queue's database"
    assert ledger.running() == [] and ledger.to_detach() == [run.job.lease]


def test_a_task_away_from_the_database_after_a_cancel_request_is_cancelled() -> None:
    ledger, _ = ledger_with_pool()
    run = attempt("a")
    ledger.claimed(run)
    ledger.request_cancel(run, grace=1.0)
    ledger.attempt_ended(run, AttemptEnd(Outcome.FAILED, error="down", database_away=True))
    [(_, finish)] = drain_outcomes(ledger)
    assert finish.status is JobStatus.CANCELLED and ledger.untrusted() == []


# -- lost ---------------------------------------------------------------------------------
def test_a_lease_lost_while_the_code_runs_reports_nothing_and_is_told_once(heard: Heard) -> None:
    ledger, pool = ledger_with_pool(heard=heard)
    run = attempt("a")
    ledger.claimed(run)
    ledger.lose(run, "renewal refused: the job was reclaimed")
    ledger.lose(run, "again")
    assert drain_outcomes(ledger) == []
    assert run.lost and run.ended is not None and run.ended.outcome is Outcome.LOST
    assert [f["reason"] for f in heard.of("lease_lost")] == [
        "renewal refused: the job was reclaimed"
    ]
    assert ledger.running() == [] and ledger.held() == []
    assert ledger.executing() == 1 and ledger.abandoned() == [run]  # its code lingers
    assert pool.stopped == [run]
    assert ledger.to_detach() == [run.job.lease]
    ledger.attempt_ended(run, SUCCESS)
    assert drain_outcomes(ledger) == [] and ledger.executing() == 0


def test_a_lease_lost_after_its_end_was_queued_is_dropped_and_told_once(heard: Heard) -> None:
    ledger, _ = ledger_with_pool(heard=heard)
    [run] = decided(ledger, SUCCESS, attempt("a"))
    drain_outcomes(ledger)  # the completer took it, and the finish came back lost
    ledger.lose(run, "result refused: the job was reclaimed")
    ledger.lose(run, "again")
    assert len(heard.of("lease_lost")) == 1
    assert ledger.running() == [] and ledger.to_detach() == [run.job.lease]


def test_an_attempt_lost_after_its_end_was_queued_is_renewed_no_more() -> None:
    """Its outcome waits for the completer (its finish is fenced: it may still land), but
    the heartbeat no longer names it, and the completer will not write it."""
    ledger, _ = ledger_with_pool()
    run, other = attempt("lost"), attempt("other")
    decided(ledger, SUCCESS, run)
    ledger.claimed(other)
    ledger.force(run, AttemptEnd(Outcome.LOST, error="untrusted"))
    assert run.lost and run.ended is SUCCESS
    assert ledger.running() == [run, other] and ledger.held() == [other]


def test_a_refused_renewal_loses_only_an_undecided_attempt_outside_its_transaction() -> None:
    ledger, _ = ledger_with_pool()
    ended, committing, running = attempt("ended"), attempt("committing"), attempt("running")
    ledger.claimed(ended, committing, running)
    ledger.attempt_ended(ended, SUCCESS)  # its finish may simply have landed
    committing.transaction = TransactionState.OPEN  # its fenced commit decides
    for run in (ended, committing, running):
        ledger.refused(run, "renewal refused")
    assert [r.lost for r in (ended, committing, running)] == [False, False, True]


def test_a_detach_stays_due_until_a_heartbeat_naming_it_lands() -> None:
    ledger, _ = ledger_with_pool()
    first, second = attempt("a"), attempt("b")
    ledger.claimed(first, second)
    ledger.lose(first, "lost")
    ledger.lose(second, "lost")
    assert ledger.to_detach() == [first.job.lease, second.job.lease]
    ledger.detach_landed([first.job.lease])
    assert ledger.to_detach() == [second.job.lease]


def test_a_sweep_is_taken_once() -> None:
    ledger, _ = ledger_with_pool()
    assert not ledger.take_sweep()
    ledger.request_sweep()
    assert ledger.take_sweep() and not ledger.take_sweep()


# -- cancel requests, untrusted leases ----------------------------------------------------
def test_a_cancel_request_gives_the_code_its_grace_once(heard: Heard) -> None:
    ledger, _ = ledger_with_pool(heard=heard)
    run = attempt("a")
    ledger.claimed(run)
    ledger.deadlines_changed.clear()
    ledger.request_cancel(run, grace=5.0)
    deadline = run.cancel_deadline
    ledger.request_cancel(run, grace=50.0)
    assert run.cancel_requested and run.cancel_deadline == deadline
    assert ledger.deadlines_changed.is_set()
    assert heard.names().count("job_cancel_requested") == 1


def test_an_untrusted_attempt_is_given_back_once_and_forgotten() -> None:
    ledger, _ = ledger_with_pool()
    run = attempt("a")
    ledger.claimed(run)
    ledger.mark_untrusted(run)
    ledger.mark_untrusted(run)
    assert ledger.untrusted() == [run] and ledger.newly_untrusted.is_set()
    ledger.forget_untrusted(run)
    assert ledger.untrusted() == []


# -- saved ------------------------------------------------------------------------------------
def test_the_last_save_wakes_the_fetch_loop_and_each_save_forgets() -> None:
    """A burst run waits for its own unsaved outcomes: the save of the last one wakes it."""
    ledger, _ = ledger_with_pool()
    first, second = decided(ledger, SUCCESS, attempt("a"), attempt("b"))
    ledger.slot_freed.clear()
    ledger.saved([first])
    assert not ledger.slot_freed.is_set() and ledger.running() == [second]
    ledger.saved([second])
    assert ledger.slot_freed.is_set() and ledger.running() == []
    assert not ledger.drop(second)  # already forgotten


# -- the buffer of jobs claimed ahead -------------------------------------------------------
def test_the_buffer_starts_the_best_first_and_takes_no_slot() -> None:
    ledger, _ = ledger_with_pool(concurrency=1)
    low_old = job("low-old", priority=0, run_at=1.0)
    high = job("high", priority=5, run_at=9.0)
    low_new = job("low-new", priority=0, run_at=2.0)
    tie = job("low-new-b", priority=0, run_at=2.0)
    ledger.buffer([low_new, high])
    ledger.buffer([tie, low_old])
    assert ledger.free_slots() == 1 and ledger.buffered() == 4
    assert [j.id for j in ledger.ahead()] == ["high", "low-old", "low-new", "low-new-b"]
    assert [j.id for j in ledger.take_ahead(2)] == ["high", "low-old"]
    assert ledger.take_ahead(0) == [] and ledger.take_ahead(-1) == []
    assert [j.id for j in ledger.take_ahead(5)] == ["low-new", "low-new-b"]
    assert ledger.buffered() == 0


def test_jobs_given_back_leave_the_buffer_but_are_renewed_until_released() -> None:
    ledger, _ = ledger_with_pool()
    kept, refused = job("kept"), job("refused")
    ledger.buffer([kept, refused])
    ledger.slot_freed.clear()
    ledger.give_back([])
    assert not ledger.slot_freed.is_set()  # nothing to wake for
    ledger.give_back([refused])
    assert ledger.slot_freed.is_set()
    assert ledger.buffered() == 1 and ledger.to_release() == [refused]
    assert ledger.ahead() == [kept, refused]  # both leases renewed
    ledger.released_ahead([refused])
    assert ledger.to_release() == [] and ledger.ahead() == [kept]


def test_a_cancel_of_a_buffered_job_gives_it_back_once(heard: Heard) -> None:
    ledger, _ = ledger_with_pool(heard=heard)
    buffered = job("b")
    ledger.buffer([buffered])
    ledger.cancel_ahead(buffered)
    ledger.cancel_ahead(buffered)  # no longer buffered: nothing more
    ledger.cancel_ahead(job("never-buffered"))
    assert ledger.to_release() == [buffered] and ledger.buffered() == 0
    assert [f["job_id"] for f in heard.of("job_cancel_requested")] == ["b"]


def test_a_buffered_job_whose_lease_is_gone_is_forgotten_and_told_once(heard: Heard) -> None:
    ledger, _ = ledger_with_pool(heard=heard)
    buffered, given_back = job("b"), job("g")
    ledger.buffer([buffered, given_back])
    ledger.give_back([given_back])
    for lost in (buffered, given_back, buffered):
        ledger.lose_ahead(lost, "reclaimed")
    assert ledger.ahead() == [] and ledger.to_release() == []
    assert [(f["job_id"], f["claimed_ahead"]) for f in heard.of("lease_lost")] == [
        ("b", True), ("g", True),
    ]  # fmt: skip


# -- a claim repeated by a database that forgot it -----------------------------------------
def test_a_claim_of_a_lease_the_worker_still_holds_is_set_apart(heard: Heard) -> None:
    """Running, its code abandoned after a lost lease, or untrusted: a claim of the same
    lease is given back unstarted; a new execution of the same job is not a repeat."""
    ledger, _ = ledger_with_pool(concurrency=4, heard=heard)
    running, lingering, untrusted = attempt("running"), attempt("lingering"), attempt("untrusted")
    ledger.claimed(running, lingering, untrusted)
    ledger.lose(lingering, "lost")  # out of `running()`, its code still runs
    ledger.mark_untrusted(untrusted)
    ledger.lose(untrusted, "untrusted")
    ledger.attempt_ended(untrusted, SUCCESS)  # its code returned: only untrusted now
    new_execution, fresh = job("running", execution_id=2), job("fresh")
    repeats = [running.job, lingering.job, untrusted.job]
    ledger.slot_freed.clear()
    assert ledger.set_apart_repeats([*repeats, new_execution, fresh]) == [new_execution, fresh]
    assert ledger.to_release() == repeats
    assert [f["job_id"] for f in heard.of("claim_repeated")] == [
        "running", "lingering", "untrusted",
    ]  # fmt: skip
    assert ledger.slot_freed.is_set()  # the fetch loop gives them back
    assert ledger.set_apart_repeats([fresh]) == [fresh]


# -- waking the supervisor ------------------------------------------------------------------
def test_a_claim_wakes_the_supervisor_only_for_a_deadline_before_its_next_pass() -> None:
    ledger, _ = ledger_with_pool()
    ledger.supervisor_passes_within = 1.0
    ledger.claimed(attempt("trusted-a-minute"))
    assert not ledger.deadlines_changed.is_set()
    silent = attempt("silent")
    silent.heartbeat_timeout = 0.5
    ledger.claimed(silent)
    assert ledger.deadlines_changed.is_set()
