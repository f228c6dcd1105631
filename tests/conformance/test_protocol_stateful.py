"""The lease protocol under random sequences of operations (hypothesis, stateful).

Three worker slots enqueue, claim, renew, finish, fail, crash (stop renewing: the slot
gets a new worker and the old attempts turn into zombies), wake up from a pause and
write with a stale lease, reap, mark stale workers, cancel and replay, while a fake clock
(`now`, passed to every call) moves forward. After every step the invariants of
docs/design/protocol.md are checked on every job, from one read of all the jobs and their
executions (`all_jobs`, two statements; `get_job` per job and step was 15,000 calls of 4-6 round
trips); at the end of each example `get_job` and `list_jobs` must show every job the same:

- I1 every job is terminal, queued, or running under a lease (with a worker);
- I2 at most one execution of a job is open, and it is the running one's current one;
- I3 a write with a stale lease is refused and changes no job at all (in the rules);
- I4 every ended execution has an outcome; a crashed one has its crash context;
- I5 attempts <= max_retries + 1, a job past its retries is not queued, a dead job
  says why, attempts count exactly the counted executions since the last replay;
- I6 every enqueued job is still there; execution ids only grow.

Retry backoff is 0 and every time is whole seconds, so that ISO-8601 times compare
exactly. `derandomize=True` makes the run the same every time; so does a fake clock that
starts at a fixed time (`START`), not at the wall clock's; and this test's time limit is
its own (`PROTOCOL_TIMEOUT`), because a timeout that interrupts a hypothesis run is
reported as a flaky test, not as a timeout.

The default run takes 25 examples of 30 steps (750 steps a backend: 10 s on PostgreSQL and
4 s on SQLite alone, against 38 s and 17 s for 100); `HEARTQ_THOROUGH=1` takes 100, the long
run (docs/TESTING.md, "heartq's own suite")."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from heartq.errors import LeaseLost
from heartq.lifecycle.fate import cancelled, failed, succeeded
from heartq.model import (
    TERMINAL_STATUSES,
    CancelResult,
    ClaimedJob,
    DetectedBy,
    Finish,
    JobStatus,
    Outcome,
    Progress,
    Renewal,
    RenewStatus,
)
from heartq.store import Store
from tests.support import examples

from .support import CRASH_KEYS, all_jobs, epoch, new_job, register

SLOTS = 3
RENEW_LEASE = 30.0
START = 1_000_000_000.0
"""Where the fake clock starts (2001-09-09T01:46:40Z, whole seconds), far from the real
time on purpose: every example stores the same times whatever the wall clock says, and a
statement that read the database's own clock instead of the `now` it was given would be
decades off and break the model on the first example of every run, not now and then."""
PROTOCOL_TIMEOUT = 600
"""Seconds this test may run (the suite's default, pyproject's `timeout`, is 120): its
wall time follows the machine's load (PostgreSQL: 9-20 s at a load of 2-3 on 2 cores).
Past its limit pytest-timeout raises `Failed` inside a step; hypothesis takes that for a
failing example, its replay differs, and it reports `Flaky` ("The second run stopped
drawing earlier than the first run"); `_timeout_in` turns that back into the timeout."""
STATUSES = {str(s) for s in JobStatus}

SETTINGS = settings(
    max_examples=examples(25, thorough=100),
    stateful_step_count=30,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

slots = st.integers(min_value=0, max_value=SLOTS - 1)
picks = st.integers(min_value=0, max_value=1_000)
STALE_WRITES = [
    "finish-success",
    "finish-fail",
    "finish-cancelled",
    "renew",
    "progress",
    "checkpoint",
    "release",
    "crash-attempt",
]


class ProtocolMachine(RuleBasedStateMachine):
    make_store: Callable[[], Store]

    def __init__(self) -> None:
        super().__init__()
        self._store = type(self).make_store()
        self.fresh: dict[str, dict[str, Any]] | None = None  # `_all()`, if no store call since
        self.now = START
        self.generation = 0
        self.workers: list[str] = []
        for _ in range(SLOTS):
            self.workers.append(self._new_worker())
        self.held: dict[str, dict[str, ClaimedJob]] = {w: {} for w in self.workers}
        self.zombies: list[ClaimedJob] = []  # attempts of workers that stopped or lost them
        self.max_retries: dict[str, int] = {}
        self.last_eid: dict[str, int] = {}
        self.replay_floor: dict[str, int] = {}  # executions up to this one predate a replay

    def teardown(self) -> None:
        try:
            if sys.exc_info()[1] is None:  # not while a failing step's error propagates
                self._readers_agree(self._all())
        finally:
            self.store.link.close()

    # -- helpers -------------------------------------------------------------------------
    def _holding(self) -> bool:
        return any(self.held.values())

    def _busy_slots(self) -> list[int]:
        return [i for i, w in enumerate(self.workers) if self.held[w]]

    def _new_worker(self) -> str:
        self.generation += 1
        worker_id = f"w{self.generation}"
        register(self.store, worker_id, self.now)
        return worker_id

    def _job(self, job_id: str) -> dict[str, Any]:
        return self._all()[job_id]

    @property
    def store(self) -> Store:
        """The store under test: any call of it may change the jobs (`fresh` is gone)."""
        self.fresh = None
        return self._store

    def _all(self) -> dict[str, dict[str, Any]]:
        """Every job (`all_jobs`), read again only if the store was called since."""
        if self.fresh is None:
            self.fresh = all_jobs(self._store)
        return self.fresh

    @staticmethod
    def _is_current(job: dict[str, Any], attempt: ClaimedJob) -> bool:
        return job["status"] == JobStatus.RUNNING and job["execution_id"] == attempt.execution_id

    def _pick_held(self, pick: int) -> tuple[str, ClaimedJob]:
        """One attempt some live worker holds (rules using it require `_holding`)."""
        attempts = sorted(
            ((w, a) for w in self.workers for a in self.held[w].values()),
            key=lambda pair: (pair[0], pair[1].id),
        )
        return attempts[pick % len(attempts)]

    def _pick_busy_slot(self, pick: int) -> int:
        busy = self._busy_slots()
        return busy[pick % len(busy)]

    def _drop(self, worker_id: str, attempt: ClaimedJob, *, zombie: bool) -> None:
        self.held[worker_id].pop(attempt.id, None)
        if zombie:
            self.zombies.append(attempt)

    def _stale_write(self, kind: str, attempt: ClaimedJob) -> None:
        """Write with a lease that the database no longer honours; must be refused."""
        store, lease, now = self.store, attempt.lease, self.now
        if kind == "finish-success":
            assert store.finish([succeeded(attempt, '"stale"')], now=now) == [lease]
        elif kind == "finish-fail":
            assert store.finish([failed(attempt, Outcome.FAILED, "stale")], now=now) == [lease]
        elif kind == "finish-cancelled":
            assert store.finish([cancelled(attempt)], now=now) == [lease]
        elif kind in ("renew", "progress"):
            progress = Progress(0.5, "stale", "stale") if kind == "progress" else None
            answer = store.heartbeat("zombie", [Renewal(lease, progress)], RENEW_LEASE, now=now)
            assert answer == {lease: RenewStatus.LOST}
        elif kind == "checkpoint":
            with pytest.raises(LeaseLost):
                store.save_checkpoint(lease, '{"stale": true}', now=now)
        elif kind == "release":
            assert store.release([lease], now=now) == [lease]
        else:
            assert kind == "crash-attempt"
            crash = {"reason": "stale child exit"}
            assert store.crash_attempt(lease, crash, DetectedBy.CHILD_EXIT, now=now) is None

    # -- rules ---------------------------------------------------------------------------
    @initialize(
        count=st.integers(min_value=1, max_value=4),
        max_retries=st.integers(min_value=0, max_value=2),
    )
    def start_with_work(self, count: int, max_retries: int) -> None:
        self.enqueue(count, max_retries, 0, 0)
        self.claim(0, limit=2, lease=30)

    @rule(
        count=st.integers(min_value=1, max_value=3),
        max_retries=st.integers(min_value=0, max_value=2),
        priority=st.integers(min_value=-1, max_value=1),
        delay=st.sampled_from([0, 0, 10]),
    )
    def enqueue(self, count: int, max_retries: int, priority: int, delay: int) -> None:
        jobs = [
            new_job(
                args={"n": len(self.max_retries) + i},
                max_retries=max_retries,
                priority=priority,
                delay=delay,
                retry_backoff=0.0,
            )
            for i in range(count)
        ]
        ids = self.store.enqueue(jobs, now=self.now)
        assert len(set(ids)) == count
        for job_id in ids:
            assert job_id not in self.max_retries
            self.max_retries[job_id] = max_retries
            self.last_eid[job_id] = 0
            self.replay_floor[job_id] = 0

    @precondition(lambda self: bool(self.max_retries))
    @rule(
        slot=slots,
        limit=st.integers(min_value=1, max_value=3),
        lease=st.sampled_from([10, 30, 60]),
    )
    def claim(self, slot: int, limit: int, lease: int) -> None:
        worker_id = self.workers[slot]
        before = self._all()
        runnable = sorted(
            (
                j
                for j in before.values()
                if j["status"] == JobStatus.QUEUED and epoch(j["run_at"]) <= self.now
            ),
            key=lambda j: (-j["priority"], epoch(j["run_at"]), j["id"]),
        )
        claimed = self.store.claim(worker_id, ["default"], limit, lease, now=self.now)
        assert len(claimed) == min(limit, len(runnable))
        assert {c.id for c in claimed} == {j["id"] for j in runnable[: len(claimed)]}
        for attempt in claimed:
            was = before[attempt.id]
            assert attempt.execution_id == was["execution_id"] + 1
            assert attempt.attempt == was["attempts"] + 1
            assert attempt.checkpoint == was["checkpoint"]
            assert attempt.lease_expires_at == self.now + lease  # whole seconds: exact
            self.held[worker_id][attempt.id] = attempt

    @precondition(lambda self: self._holding())
    @rule(pick=picks, with_progress=st.booleans(), checkpoint=st.booleans())
    def heartbeat(self, pick: int, with_progress: bool, checkpoint: bool) -> None:
        """A busy worker's heartbeat tick (after saving one attempt's checkpoint)."""
        if checkpoint:
            self._save_checkpoint(pick)
            if not self._holding():
                return
        worker_id = self.workers[self._pick_busy_slot(pick)]
        attempts = list(self.held[worker_id].values())
        before = self._all()
        progress = Progress(0.5, "stage", "message") if with_progress else None
        answers = self.store.heartbeat(
            worker_id, [Renewal(a.lease, progress) for a in attempts], RENEW_LEASE, now=self.now
        )
        assert set(answers) == {a.lease for a in attempts}
        for attempt in attempts:
            after = self._job(attempt.id)  # one read for all (`_all`)
            if self._is_current(before[attempt.id], attempt):
                assert answers[attempt.lease] in (RenewStatus.RENEWED, RenewStatus.CANCEL_REQUESTED)
                # the worker's lease, renewed; never less than the attempt's floor
                floor = epoch(before[attempt.id]["lease_expires_at"]) or 0.0
                assert epoch(after["lease_expires_at"]) == max(self.now + RENEW_LEASE, floor)
                if with_progress:
                    assert after["progress"] == {
                        "value": 0.5,
                        "stage": "stage",
                        "message": "message",
                    }
            else:
                assert answers[attempt.lease] is RenewStatus.LOST
                assert after == before[attempt.id]  # I3
                self._drop(worker_id, attempt, zombie=True)

    def _save_checkpoint(self, pick: int) -> None:
        worker_id, attempt = self._pick_held(pick)
        everything = self._all()
        before = everything[attempt.id]
        checkpoint = {"by": worker_id, "eid": attempt.execution_id}
        if self._is_current(before, attempt):
            answer = self.store.save_checkpoint(attempt.lease, json.dumps(checkpoint), now=self.now)
            assert answer in (RenewStatus.RENEWED, RenewStatus.CANCEL_REQUESTED)
            assert self._job(attempt.id)["checkpoint"] == checkpoint
        else:
            with pytest.raises(LeaseLost):
                self.store.save_checkpoint(attempt.lease, json.dumps(checkpoint), now=self.now)
            assert self._all() == everything  # I3
            self._drop(worker_id, attempt, zombie=True)

    def _finish(self, pick: int, make: Callable[[ClaimedJob], Finish]) -> None:
        worker_id, attempt = self._pick_held(pick)
        everything = self._all()
        before = everything[attempt.id]
        finish = make(attempt)
        lost = self.store.finish([finish], now=self.now)
        now_all = self._all()
        after = now_all[attempt.id]
        if self._is_current(before, attempt):
            assert lost == []
            expected = finish.status
            if before["cancel_requested"] and expected == JobStatus.QUEUED:
                expected = JobStatus.CANCELLED  # a cancel request is never lost to a retry
            assert after["status"] == expected
            assert not after["cancel_requested"]
            assert after["executions"][-1]["outcome"] == finish.outcome
            self._drop(worker_id, attempt, zombie=False)
        else:
            assert lost == [attempt.lease]
            assert now_all == everything  # I3
            self._drop(worker_id, attempt, zombie=True)

    @precondition(lambda self: self._holding())
    @rule(pick=picks, kind=st.sampled_from(["success", "fail", "permanent", "cancelled"]))
    def finish(self, pick: int, kind: str) -> None:
        """An attempt ends: succeeded, raised (retry or dead), Permanent, or cancelled."""

        def make(attempt: ClaimedJob) -> Finish:
            if kind == "success":
                return succeeded(attempt, json.dumps({"eid": attempt.execution_id}))
            if kind == "cancelled":
                return cancelled(attempt, "cancelled")
            permanent = kind == "permanent"
            finish = failed(attempt, Outcome.FAILED, "ValueError: boom", permanent=permanent)
            dead = permanent or attempt.attempt > attempt.max_retries
            assert finish.status == (JobStatus.DEAD if dead else JobStatus.QUEUED)
            return finish

        self._finish(pick, make)

    @precondition(lambda self: self._holding())
    @rule(pick=picks)
    def release(self, pick: int) -> None:
        """Graceful shutdown of a busy worker: give everything back; a new one starts."""
        slot = self._pick_busy_slot(pick)
        worker_id = self.workers[slot]
        attempts = list(self.held[worker_id].values())
        before = self._all()
        lost = self.store.release([a.lease for a in attempts], now=self.now)
        for attempt in attempts:
            after = self._job(attempt.id)  # one read for all (`_all`)
            if self._is_current(before[attempt.id], attempt):
                assert attempt.lease not in lost
                cancel = before[attempt.id]["cancel_requested"]
                assert after["status"] == (JobStatus.CANCELLED if cancel else JobStatus.QUEUED)
                assert not after["cancel_requested"]
                assert after["attempts"] == before[attempt.id]["attempts"] - 1
                assert after["executions"][-1]["outcome"] == Outcome.RELEASED
            else:
                assert attempt.lease in lost
                assert after == before[attempt.id]  # I3
        self.store.stop_worker(worker_id, now=self.now)
        self.held.pop(worker_id)
        self.workers[slot] = self._new_worker()
        self.held[self.workers[slot]] = {}

    @precondition(lambda self: self._holding())
    @rule(pick=picks)
    def crash(self, pick: int) -> None:
        """A busy worker stops renewing (killed, frozen): its attempts become zombies
        that may wake up later; a new worker takes its slot."""
        slot = self._pick_busy_slot(pick)
        worker_id = self.workers[slot]
        self.zombies.extend(self.held.pop(worker_id).values())
        self.workers[slot] = self._new_worker()
        self.held[self.workers[slot]] = {}

    @precondition(lambda self: bool(self.zombies) or self._holding())
    @rule(
        pick=picks,
        kinds=st.permutations(STALE_WRITES),
        take_over=st.sampled_from([True, True, False]),
        slot=slots,
    )
    def pause_then_write(self, pick: int, kinds: list[str], take_over: bool, slot: int) -> None:
        """An attempt pauses (its worker stops renewing it), then wakes up and writes: a
        zombie, or one a live worker holds now. If its job is still its own, the pause
        lasts past the lease: the reaper reclaims the job and (`take_over`) another
        worker claims it (with another lease length, so that a stale renewal would show).
        Every kind of write is tried in turn; the fence must refuse each one and change
        nothing."""
        candidates = self.zombies + [a for w in self.workers for a in self.held[w].values()]
        attempt = candidates[pick % len(candidates)]
        for worker_id in self.workers:
            if self.held[worker_id].get(attempt.id) is attempt:
                self._drop(worker_id, attempt, zombie=True)
        job = self._job(attempt.id)
        if self._is_current(job, attempt):
            wait = max(0, math.ceil(epoch(job["lease_expires_at"]) - self.now)) + 1
            self.reap(limit=1000, wait=wait)
            job = self._job(attempt.id)
            assert not self._is_current(job, attempt)
            if take_over and job["status"] == JobStatus.QUEUED:
                self.now = max(self.now, epoch(job["run_at"]))
                self.claim(slot, limit=1000, lease=45)
        before = self._all()
        for kind in kinds:
            self._stale_write(kind, attempt)
            assert self._all() == before, kind  # I3

    @rule(limit=st.integers(min_value=1, max_value=5), wait=st.sampled_from([0, 31, 61]))
    def reap(self, limit: int, wait: int) -> None:
        """(After `wait` seconds) reclaim expired leases."""
        self.now += wait
        before = self._all()
        running = [j for j in before.values() if j["status"] == JobStatus.RUNNING]
        must = {j["id"] for j in running if epoch(j["lease_expires_at"]) < self.now}
        may = {j["id"] for j in running if epoch(j["lease_expires_at"]) <= self.now}
        reclaimed = self.store.reclaim_expired(DetectedBy.LEASE_EXPIRED, limit=limit, now=self.now)
        ids = [r.job_id for r in reclaimed]
        assert len(ids) == len(set(ids)) <= limit
        assert set(ids) <= may
        if len(ids) < limit:
            assert must <= set(ids)
        for r in reclaimed:
            assert r.execution_id == before[r.job_id]["execution_id"]
            after = self._job(r.job_id)
            assert after["status"] == r.status
            dead = before[r.job_id]["attempts"] > self.max_retries[r.job_id]
            if before[r.job_id]["cancel_requested"]:  # asked to stop: never run again
                assert r.status == JobStatus.CANCELLED
            else:
                assert r.status == (JobStatus.DEAD if dead else JobStatus.QUEUED)
            assert after["executions"][-1]["outcome"] == Outcome.CRASHED

    @rule(stale_after=st.sampled_from([20, 60]), wait=st.sampled_from([0, 31, 61]))
    def mark_stale_workers(self, stale_after: int, wait: int) -> None:
        """(After `wait` seconds) mark silent workers inactive and reclaim their jobs."""
        self.now += wait
        workers = {w["id"]: w for w in self.store.list_workers(include_all=True)}
        before = self._all()
        stale = self.store.mark_stale_workers(stale_after, DetectedBy.STALE_WORKER, now=self.now)
        found = {s.id for s in stale}
        for worker_id, info in workers.items():
            age = self.now - epoch(info["last_heartbeat_at"])
            if info["status"] == "active" and age > stale_after:
                assert worker_id in found
            if worker_id in found:
                assert info["status"] == "active" and age >= stale_after
        for s in stale:
            held = {
                j["id"]
                for j in before.values()
                if j["status"] == JobStatus.RUNNING and j["worker_id"] == s.id
            }
            assert {r.job_id for r in s.reclaimed} == held
        remaining = {w["id"]: w for w in self.store.list_workers(include_all=True)}
        assert all(remaining[w]["status"] == "inactive" for w in found)

    @precondition(lambda self: bool(self.max_retries))
    @rule(pick=picks)
    def cancel(self, pick: int) -> None:
        ids = sorted(self.max_retries)
        job_id = ids[pick % len(ids)]
        everything = self._all()
        before = everything[job_id]
        answer = self.store.cancel_job(job_id, now=self.now)
        after = self._job(job_id)
        if before["status"] == JobStatus.QUEUED:
            assert answer is CancelResult.CANCELLED
            assert after["status"] == JobStatus.CANCELLED
        elif before["status"] == JobStatus.RUNNING:
            assert answer is CancelResult.CANCEL_REQUESTED
            assert after["status"] == JobStatus.RUNNING
            assert after["lease_expires_at"] == before["lease_expires_at"]
        else:
            assert answer is CancelResult.ALREADY_FINISHED
            assert self._all() == everything

    @rule(pick=picks, everything=st.booleans())
    def replay(self, pick: int, everything: bool) -> None:
        dead = sorted(j["id"] for j in self.store.list_jobs(status="dead", limit=100_000))
        if everything:
            assert sorted(self.store.replay_dead(None, now=self.now)) == dead
            replayed = dead
        elif dead:
            replayed = [dead[pick % len(dead)]]
            assert self.store.replay_dead(replayed, now=self.now) == replayed
        else:
            return
        for job_id in replayed:
            after = self._job(job_id)
            assert (after["status"], after["attempts"]) == (JobStatus.QUEUED, 0)
            self.replay_floor[job_id] = after["execution_id"]

    @rule(seconds=st.sampled_from([1, 5, 11, 31, 61, 100]))
    def advance_clock(self, seconds: int) -> None:
        self.now += seconds

    # -- invariants ----------------------------------------------------------------------
    def _readers_agree(self, listed: dict[str, dict[str, Any]]) -> None:
        """`get_job` and `list_jobs` show every job as the test's own read found it."""
        public = {j["id"]: j for j in self.store.list_jobs(limit=100_000)}
        assert set(public) == set(listed)
        for job_id in sorted(listed):
            shown = self.store.get_job(job_id)
            assert {key: shown[key] for key in listed[job_id]} == listed[job_id]
            assert public[job_id] == {k: v for k, v in listed[job_id].items() if k != "executions"}

    @invariant()
    def protocol_invariants(self) -> None:
        listed = self._all()  # often the step's last read, if the store was not called since
        assert set(listed) == set(self.max_retries), "a job appeared or disappeared"  # I6
        for job_id in sorted(listed):
            job = listed[job_id]
            status = job["status"]
            assert status in STATUSES
            # I1: terminal, queued, or running under a lease with an owner
            if status == JobStatus.RUNNING:
                assert job["lease_expires_at"] is not None and job["worker_id"] is not None
            else:
                assert job["lease_expires_at"] is None
            if status in TERMINAL_STATUSES:
                assert job["finished_at"] is not None
            # execution ids strictly increase, one per claim, and never go back
            executions = job["executions"]
            eids = [e["execution_id"] for e in executions]
            assert eids == list(range(1, len(eids) + 1))
            assert job["execution_id"] == len(eids)
            assert job["execution_id"] >= self.last_eid[job_id]
            self.last_eid[job_id] = job["execution_id"]
            # I2: at most one open execution, the running attempt's
            open_ = [e for e in executions if e["outcome"] is None]
            if status == JobStatus.RUNNING:
                assert [e["execution_id"] for e in open_] == [job["execution_id"]]
                assert open_[0]["worker_id"] == job["worker_id"]
            else:
                assert open_ == []
            # I4: every ended attempt has its outcome; crashes keep their context
            for e in executions:
                assert (e["outcome"] is None) == (e["ended_at"] is None)
                if e["outcome"] == Outcome.CRASHED:
                    assert set(e["crash"] or {}) >= CRASH_KEYS
            # I5: bounded attempts, counted exactly, and a reason for the dead
            max_retries = self.max_retries[job_id]
            assert job["max_retries"] == max_retries
            assert 0 <= job["attempts"] <= max_retries + 1
            if job["attempts"] > max_retries:
                assert status != JobStatus.QUEUED
            counted = [
                e
                for e in executions
                if e["execution_id"] > self.replay_floor[job_id]
                and e["outcome"] != Outcome.RELEASED
            ]
            assert job["attempts"] == len(counted)
            if status == JobStatus.DEAD:
                assert job["dead_reason"]
            else:
                assert job["dead_reason"] is None


def _timeout_in(error: BaseException) -> BaseException | None:
    """pytest-timeout's `Failed`, if `error` (hypothesis's report) came of one: among
    its causes, contexts and grouped exceptions."""
    pending, seen = [error], set()
    while pending:
        found = pending.pop()
        if id(found) in seen:
            continue
        seen.add(id(found))
        if isinstance(found, pytest.fail.Exception) and "pytest-timeout" in str(found):
            return found
        pending += [e for e in (found.__cause__, found.__context__) if e is not None]
        if isinstance(found, BaseExceptionGroup):
            pending += found.exceptions
    return None


@pytest.mark.long(30)
@pytest.mark.timeout(PROTOCOL_TIMEOUT)
def test_protocol_invariants_hold(empty_stores: Callable[[], Store]) -> None:
    machine = type("Protocol", (ProtocolMachine,), {"make_store": staticmethod(empty_stores)})
    try:
        run_state_machine_as_test(machine, settings=SETTINGS)
    except Flaky as flaky:
        timeout = _timeout_in(flaky)
        if timeout is None:
            raise
        pytest.fail(f"{timeout} It interrupted an example, so hypothesis reported "
                    f"{type(flaky).__name__}: a timeout, not a flaky test.")  # fmt: skip
