"""The completer's batching (`heartq.worker.completer`; no database): what is saved
together, when a batch is flushed, how a store that cannot be written is waited out, and
what is reported lost.

The completer's loop runs in the test's thread (`Saving.run`: the ended attempts, then
the stop's sentinel, then the loop until it sees it); its clock is a fake one where a
test looks at the flush interval, and its pause between retries a recording one.
`test_the_thread_*` run it on its own thread, through `start` and `stop`, as a worker does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from heartq.errors import StoreUnavailable
from heartq.hooks import CrashInfo
from heartq.lifecycle.fate import AttemptEnd, unknown_task_end
from heartq.model import DetectedBy, Finish, JobStatus, Outcome, Progress
from heartq.worker import completer as completer_module
from heartq.worker.attempt import RunningJob
from heartq.worker.completer import RETRY_BACKOFF, Completer
from heartq.worker.ledger import Ledger

from .fakes import DOWN, WORKER, FakeStore, Heard, RecordingPool, attempt, job

SUCCESS = AttemptEnd(Outcome.SUCCEEDED, result_json='"ok"')
FAILURE = AttemptEnd(Outcome.FAILED, error="ValueError: boom")
CRASH = AttemptEnd(Outcome.CRASHED, error="killed", crash={"reason": "child exited", "signal": 9})


class ScriptedStop:
    """The completer's own stop, as its retries wait on it: records each pause and
    answers "stopped" from the `stop_at`-th one on (never, by default)."""

    def __init__(self, stop_at: int | None = None) -> None:
        self.waits: list[float] = []
        self.stop_at = stop_at

    def wait(self, timeout: float) -> bool:
        self.waits.append(timeout)
        return self.stop_at is not None and len(self.waits) >= self.stop_at

    def set(self) -> None: ...


class FakeClock:
    """The completer's `time`: `sleep` moves `now` on and delivers what was scheduled
    to arrive by then (`at`)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []
        self._arrivals: list[tuple[float, Callable[[], None]]] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        due = [a for a in self._arrivals if a[0] <= self.now]
        self._arrivals = [a for a in self._arrivals if a[0] > self.now]
        for _, arrive in due:
            arrive()

    def at(self, offset: float, arrive: Callable[[], None]) -> None:
        self._arrivals.append((self.now + offset, arrive))

    def advance(self, seconds: float) -> None:
        """Time passes elsewhere (not a sleep of the completer's)."""
        self.sleep(seconds)
        self.sleeps.pop()


@dataclass
class Saving:
    """A completer over a fake store and a real ledger, whose events `heard` hears (its
    own if not given); the crash hooks it runs are `crashed`'s."""

    flush_interval: float = 0.0
    batch_size: int = 200
    stop_at: int | None = None
    heard: Heard = field(default_factory=Heard)
    store: FakeStore = field(default_factory=FakeStore)
    crashed: list[CrashInfo] = field(default_factory=list)
    retries: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.ledger = Ledger(WORKER, 1000, self.heard.stream)
        self.ledger.pool = RecordingPool()
        self.heard.stream.hooks.crash(self.crashed.append)
        self.completer = Completer(
            self.store,
            self.ledger,
            flush_interval=self.flush_interval,
            batch_size=self.batch_size,
            on_retry=self.retries.append,
        )
        self.stop = ScriptedStop(self.stop_at)
        self.completer._stopping = self.stop  # type: ignore[assignment]  # its retries wait here

    def ended(self, job_id: str, end: AttemptEnd = SUCCESS, **fields: Any) -> RunningJob:
        """An attempt the store holds, claimed and ended by its code: queued."""
        run = attempt(job(job_id, **fields), store=self.store)
        self.store.running[run.job.lease] = run.job
        self.ledger.claimed(run)
        self.ledger.attempt_ended(run, end)
        return run

    def run(self) -> None:
        """Everything queued so far, then the stop's sentinel: the loop until it ends."""
        self.ledger.outcomes.put(None)
        self.completer._loop()

    def batches(self) -> list[list[str]]:
        return [[f.lease.job_id for f in batch] for batch in self.store.finish_batches]


def lost_reasons(heard: Heard) -> dict[str, str]:
    return {f["job_id"]: f["reason"] for f in heard.of("lease_lost")}


# -- batches ------------------------------------------------------------------------------
def test_ended_attempts_are_saved_together_in_one_fenced_statement() -> None:
    s = Saving()
    runs = [s.ended(f"j{i}") for i in range(5)]
    s.run()
    assert s.batches() == [["j0", "j1", "j2", "j3", "j4"]]
    assert s.completer.batches == 1
    assert s.ledger.running() == []
    assert {x.job_id for x in s.store.finished} == {r.job.id for r in runs}


def test_a_batch_holds_at_most_batch_size_and_a_full_one_waits_for_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock()
    monkeypatch.setattr(completer_module, "time", clock)
    s = Saving(flush_interval=0.005, batch_size=3)
    for i in range(7):
        s.ended(f"j{i}")
    s.run()
    assert s.batches() == [["j0", "j1", "j2"], ["j3", "j4", "j5"], ["j6"]]
    assert clock.sleeps == []  # full batches, then the stop: no interval waited out


def test_what_ends_within_the_flush_interval_joins_the_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The completer sleeps through the interval after the first item and takes what
    queued meanwhile; what ends later waits for the next batch."""
    clock = FakeClock()
    monkeypatch.setattr(completer_module, "time", clock)
    s = Saving(flush_interval=0.005)
    s.ended("first")
    clock.at(0.002, lambda: s.ended("soon"))
    clock.at(0.004, lambda: s.ended("within-the-interval"))
    clock.at(0.006, lambda: s.ended("late"))

    def meanwhile(batch: list[Finish]) -> None:
        """The first batch's statement takes 2 ms: the late one ends, then the stop."""
        if len(s.store.finish_batches) == 1:
            clock.advance(0.002)
            s.ledger.outcomes.put(None)

    s.store.on_finish = meanwhile
    s.completer._loop()
    assert s.batches() == [["first", "soon", "within-the-interval"], ["late"]]
    assert clock.sleeps == [pytest.approx(0.005)]  # the stop cut the second gather short


def test_a_crash_and_a_committed_job_are_saved_apart_from_the_batch() -> None:
    s = Saving()
    s.ended("a")
    s.ended("crashed", CRASH)
    committed(s, "committed", SUCCESS, with_result=False)
    s.ended("b")
    s.run()
    assert s.batches() == [["a", "b"]]
    assert s.store.calls == ["crash_attempt", "save_result", "finish"]


# -- what a finish answers ----------------------------------------------------------------
def test_a_finish_the_store_answers_lost_is_reported_lost_and_the_rest_saved(
    heard: Heard,
) -> None:
    s = Saving(heard=heard)
    kept, taken = s.ended("kept"), s.ended("taken")
    s.store.reclaim("taken")  # its lease ran out meanwhile: the fenced write matches nothing
    s.run()
    assert s.batches() == [["kept", "taken"]]
    assert lost_reasons(heard) == {"taken": "result refused: the job was reclaimed"}
    assert s.ledger.running() == [] and s.ledger.to_detach() == [taken.job.lease]
    assert kept.job.lease in s.store.finished


def test_an_attempt_known_lost_is_not_written_at_all(heard: Heard) -> None:
    s = Saving(heard=heard)
    s.ended("kept")
    lost = s.ended("lost")
    lost.mark_lost()  # the heartbeater learnt it after its end was queued
    s.run()
    assert s.batches() == [["kept"]]
    assert lost_reasons(heard) == {"lost": "result not saved: the lease was lost"}


def test_a_batch_the_database_refuses_for_its_data_is_saved_item_by_item(
    heard: Heard,
) -> None:
    """Not the database's fault (a `ValueError`, not `StoreUnavailable`): the batch is
    split, and only the item the database still refuses is given up, never retried."""
    s = Saving(heard=heard)
    for job_id in ("a", "bad", "c"):
        s.ended(job_id)
    s.store.refuse_data = {"bad"}
    s.run()
    assert s.batches() == [["a", "bad", "c"], ["a"], ["bad"], ["c"]]
    assert set(lost_reasons(heard)) == {"bad"}
    assert "the database refused it" in lost_reasons(heard)["bad"]
    assert {x.job_id for x in s.store.finished} == {"a", "c"}
    assert s.ledger.running() == [] and s.stop.waits == []


# -- a store that cannot be written -----------------------------------------------------
def test_a_store_that_cannot_be_written_is_waited_out_with_backoff(heard: Heard) -> None:
    s = Saving(heard=heard)
    s.ended("a")
    s.store.fail("finish", *[DOWN] * 6)
    s.run()
    assert s.stop.waits == [*RETRY_BACKOFF, RETRY_BACKOFF[-1]]  # the last, from then on
    assert [f["attempt"] for f in heard.of("completion_retry")] == [1, 2, 3, 4, 5, 6]
    assert heard.names().count("store_unavailable") == 1
    assert heard.names().count("store_recovered") == 1
    assert s.store.calls.count("finish") == 7
    assert s.batches() == [["a"]] and s.ledger.running() == []


def test_a_completer_stopped_while_waiting_leaves_the_outcomes_unsaved() -> None:
    """Saving late is safe (the write is fenced): what did not land stays in the
    ledger, and the worker leaves itself active for the next one's liveness probe."""
    s = Saving(stop_at=2)
    run = s.ended("a")
    crashed = s.ended("crashed", CRASH)
    s.store.fail("finish", DOWN, DOWN, DOWN)
    s.store.fail("crash_attempt", DOWN, DOWN)
    s.run()
    assert s.ledger.running() == [run, crashed]
    assert s.store.finished == {} and s.store.crashes == []


# -- crashes of a child process ----------------------------------------------------------
def test_a_crash_is_closed_at_once_with_its_last_report_and_told(heard: Heard) -> None:
    s = Saving(heard=heard)
    s.store.retry_delay_of_crash = 2.5
    run = attempt(job("crashed"), store=s.store)
    s.store.running[run.job.lease] = run.job
    s.ledger.claimed(run)
    run.touch(Progress(0.5, message="half way"))  # not stored by a pulse yet
    s.store.fail("pulse", RuntimeError("best effort"))
    s.ledger.attempt_ended(run, CRASH)
    s.run()
    assert s.store.calls == ["pulse", "crash_attempt"]
    [(lease, crash, detected_by)] = s.store.crashes
    assert lease == run.job.lease and detected_by == DetectedBy.CHILD_EXIT
    assert crash == {"reason": "child exited", "signal": 9, "worker_id": WORKER}
    assert s.ledger.running() == []
    [told] = heard.of("job_crashed")
    assert (told["reason"], told["signal"]) == ("child exited", 9)
    assert [c.job_id for c in s.crashed] == ["crashed"] and s.retries == [2.5]  # its hooks
    assert heard.of("job_reclaimed")[0]["detected_by"] == DetectedBy.CHILD_EXIT


def test_a_crash_of_an_attempt_already_reclaimed_is_dropped_untold_to_the_hooks(
    heard: Heard,
) -> None:
    s = Saving(heard=heard)
    s.ended("crashed", CRASH)
    s.store.reclaim("crashed")
    s.run()
    assert s.ledger.running() == [] and s.crashed == [] and s.retries == []
    assert heard.names().count("job_crashed") == 1


def test_a_crash_the_store_refuses_is_left_to_the_reaper(heard: Heard) -> None:
    s = Saving(heard=heard)
    s.ended("crashed", CRASH)
    s.store.fail("crash_attempt", ValueError("refused"))
    s.run()
    assert s.ledger.running() == [] and s.crashed == []
    [told] = heard.of("job_crashed")
    assert "the lease reclaimer will" in told["error"]


# -- jobs their task's transaction completed ---------------------------------------------
def committed(s: Saving, job_id: str, end: AttemptEnd, *, with_result: bool) -> RunningJob:
    run = attempt(job(job_id), store=s.store)
    s.store.running[run.job.lease] = run.job
    s.ledger.claimed(run)
    s.store.commit(run.job.lease)
    run.mark_committed(with_result)
    s.ledger.attempt_ended(run, end)
    return run


def test_a_committed_jobs_result_is_saved_alone_or_not_at_all(heard: Heard) -> None:
    s = Saving(heard=heard)
    returned = committed(s, "returned", SUCCESS, with_result=False)
    handed = committed(s, "handed", SUCCESS, with_result=True)
    failed = committed(s, "failed", FAILURE, with_result=False)
    s.run()
    assert s.store.calls == ["save_result", "save_result"]  # not the one handed to its commit
    assert s.store.results[returned.job.lease] == ('"ok"', None)
    result, lost = s.store.results[failed.job.lease]
    assert result is None and lost is not None and "ValueError: boom" in lost
    assert handed.job.lease in s.store.committed  # untouched
    assert s.ledger.running() == [] and s.batches() == []
    [told] = heard.of("job_ended_after_commit")
    assert (told["job_id"], told["ended"], told["result"]) == ("failed", "failed", "lost")


def test_a_committed_jobs_result_refused_is_reported_lost(heard: Heard) -> None:
    s = Saving(heard=heard)
    run = committed(s, "late", SUCCESS, with_result=False)
    s.store.committed.discard(run.job.lease)  # its lease ran out after the commit
    s.run()
    assert lost_reasons(heard) == {"late": "result refused: the lease ran out after the commit"}
    assert s.ledger.running() == []


# -- what is told once a batch landed ----------------------------------------------------------
def test_a_retry_waiting_out_its_backoff_wakes_the_fetch_loop_then(heard: Heard) -> None:
    s = Saving(heard=heard)
    retried = s.ended("retried", FAILURE, retry_backoff=5.0)
    s.ended("dead", FAILURE, max_retries=0)
    s.run()
    [finish] = [f for batch in s.store.finish_batches for f in batch if f.lease.job_id == "retried"]
    assert finish.status is JobStatus.QUEUED and s.retries == [finish.retry_delay] != [0]
    assert [f["job_id"] for f in heard.of("job_retry_scheduled")] == ["retried"]
    assert [f["job_id"] for f in heard.of("job_dead")] == ["dead"]
    assert heard.of("job_failed")[0]["job_id"] == retried.job.id


def test_a_job_given_back_for_a_worker_that_knows_its_task_wakes_nobody_here() -> None:
    s = Saving()
    s.ended("elsewhere", unknown_task_end("gone", declared=True))
    s.run()
    [[finish]] = s.store.finish_batches
    assert finish.outcome is Outcome.RELEASED and finish.retry_delay > 0
    assert s.retries == []


# -- on its own thread, as a worker runs it ------------------------------------------------
def test_the_thread_saves_what_was_queued_before_its_stop() -> None:
    s = Saving()
    s.completer._stopping = threading.Event()
    s.completer.start()
    for i in range(3):
        s.ended(f"j{i}")
    s.completer.stop(deadline=time.monotonic() + 30)
    assert sorted(x.job_id for x in s.store.finished) == ["j0", "j1", "j2"]
    assert s.ledger.running() == []


def test_the_thread_gives_up_at_its_deadline_and_leaves_the_outcomes_unsaved() -> None:
    s = Saving()
    s.completer._stopping = threading.Event()
    s.store.fail("finish", *[StoreUnavailable("down")] * 1000)
    run = s.ended("a")
    s.completer.start()
    began = time.monotonic()
    s.completer.stop(deadline=began + 0.1)
    assert time.monotonic() - began < 10  # not waiting for the store to come back
    assert s.ledger.running() == [run] and s.store.finished == {}
