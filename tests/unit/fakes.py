"""An in-memory fake of the store interface methods the worker's claimer and completer
call, and the small parts around them (an app over it, a pool that runs nothing).

The fake keeps jobs as a store does, in three places (queued, claimed ahead, running)
under the fencing rule of every write of a lease's holder: a write naming a lease the
fake no longer holds under that execution changes nothing and is answered lost. That is
all the claimer's and completer's bookkeeping can see of a store. What a real store does
(SQL, transactions, the ready log, two backends) is tested on real databases in
tests/conformance; this fake never stands in for one there.

Faults are scripted: `fail("finish", exc, exc)` makes the next two finishes raise.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import heartq
from heartq.config import Settings
from heartq.errors import StoreUnavailable
from heartq.event_stream import EventStream
from heartq.events import Event
from heartq.lifecycle.fate import AttemptEnd
from heartq.model import (
    Claim,
    ClaimedJob,
    Finish,
    JobStatus,
    Lease,
    Outcome,
    PulseReport,
    Reclaimed,
    RenewStatus,
    TaskPolicy,
)
from heartq.worker.attempt import RunningJob
from heartq.worker.claimer import Claimer
from heartq.worker.ledger import Ledger
from heartq.worker.store_health import StoreHealth

WORKER = "w"
LEASE = 30.0


class Heard(list[Event]):
    """The events told to `stream` (a new one unless given), and to every stream it
    `listen`s to, in order: every event, whatever its level."""

    def __init__(self, stream: EventStream | None = None) -> None:
        super().__init__()
        self.stream = stream if stream is not None else EventStream()
        self.listen(self.stream)

    def listen(self, stream: EventStream) -> None:
        stream.subscribe(self.append)

    def names(self) -> list[str]:
        return [event.name for event in self]

    def of(self, name: str) -> list[dict[str, Any]]:
        """The fields of each event called `name`."""
        return [event.fields for event in self if event.name == name]


def job(
    job_id: str = "j",
    execution_id: int = 1,
    *,
    task: str = "t",
    priority: int = 0,
    run_at: float = 0.0,
    sent_at: float = 0.0,
    worker_id: str = WORKER,
    max_retries: int = 3,
    retry_backoff: float = 0.0,
) -> ClaimedJob:
    """A claimed job, as a claim returns it (its attempt the execution's number)."""
    return ClaimedJob(
        id=job_id,
        task=task,
        queue="default",
        args={},
        attempt=execution_id,
        execution_id=execution_id,
        max_retries=max_retries,
        retry_backoff=retry_backoff,
        retry_backoff_max=max(retry_backoff, 60.0),
        checkpoint=None,
        lease_expires_at=0.0,
        run_at=run_at,
        sent_at=sent_at,
        priority=priority,
        worker_id=worker_id,
    )


def attempt(
    claimed: ClaimedJob | str = "j", execution_id: int = 1, store: Any = None
) -> RunningJob:
    """An attempt of `claimed` (a job, or a job id), trusted for a minute, of no task."""
    if isinstance(claimed, str):
        claimed = job(claimed, execution_id)
    return RunningJob(
        claimed,
        None,
        store if store is not None else FakeStore(),
        claim_sent_at=time.monotonic(),
        trust_window=60.0,
        max_payload_bytes=1 << 20,
    )


def decided(ledger: Ledger, end: AttemptEnd, *runs: RunningJob) -> list[RunningJob]:
    """`runs` claimed into the ledger and ended by their code (outcomes queued)."""
    ledger.claimed(*runs)
    for run in runs:
        ledger.attempt_ended(run, end)
    return list(runs)


def drain_outcomes(ledger: Ledger) -> list[tuple[RunningJob, Any]]:
    """The ended attempts queued for the completer so far, taken out of the queue."""
    out = []
    while not ledger.outcomes.empty():
        item = ledger.outcomes.get_nowait()
        assert item is not None
        out.append(item)
    return out


@dataclass
class Waiting:
    """A queued job of the fake store."""

    id: str
    task: str = "t"
    priority: int = 0
    run_at: float = 0.0
    attempts: int = 0


@dataclass
class ClaimCall:
    """What one claim asked for: the slots it read (from the worker's callable, once,
    as a real store reads it with the database in hand) and how many jobs ahead."""

    queues: tuple[str, ...]
    slots: int
    ahead: int
    lease: float


@dataclass
class FakeStore:
    """The store interface methods the claimer and completer call, in memory."""

    queued: list[Waiting] = field(default_factory=list)
    running: dict[Lease, ClaimedJob] = field(default_factory=dict)
    ahead: dict[Lease, ClaimedJob] = field(default_factory=dict)
    """Claimed ahead, their start not recorded yet."""
    committed: set[Lease] = field(default_factory=set)
    """Jobs their task's transaction completed, their result still to save."""
    finished: dict[Lease, Finish] = field(default_factory=dict)
    results: dict[Lease, tuple[str | None, str | None]] = field(default_factory=dict)
    crashes: list[tuple[Lease, dict[str, Any], str]] = field(default_factory=list)
    pulses: list[PulseReport] = field(default_factory=list)
    declared: dict[str, TaskPolicy] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    claims: list[ClaimCall] = field(default_factory=list)
    finish_batches: list[list[Finish]] = field(default_factory=list)
    released: list[Lease] = field(default_factory=list)
    rate_wait: float | None = None
    """What every claim answers as its `rate_wait`."""
    unanswered: bool = False
    """Every claim says a statement of it raised after the others committed."""
    refuse_start: set[str] = field(default_factory=set)
    """Ids of jobs claimed ahead whose start matches nothing (a cancel was requested)."""
    refuse_data: set[str] = field(default_factory=set)
    """Ids of jobs whose finish the database refuses for their data (not a fault of
    the database: a `ValueError`), alone or in a batch."""
    retry_delay_of_crash: float = 0.0
    repeats: list[ClaimedJob] = field(default_factory=list)
    """Handed over again by the next claim (a database that forgot a claim)."""
    on_claim: Callable[[], None] | None = None
    """Called as a claim begins, before it reads the worker's free slots (what happens
    while it waits for the database: a slot frees up)."""
    on_finish: Callable[[list[Finish]], None] | None = None
    """Called with each batch a finish is given, before it answers."""
    _faults: dict[str, list[BaseException]] = field(default_factory=dict)
    _executions: dict[str, int] = field(default_factory=dict)

    # -- the test's side -----------------------------------------------------------------
    def enqueue(self, *ids: str, task: str = "t", priority: int = 0, run_at: float = 0.0) -> None:
        self.queued += [Waiting(i, task, priority, run_at) for i in ids]

    def fail(self, method: str, *errors: BaseException) -> None:
        """The next calls of `method` raise these, one each, in order."""
        self._faults.setdefault(method, []).extend(errors)

    def faults_left(self) -> int:
        """How many scripted faults have not been raised yet."""
        return sum(len(errors) for errors in self._faults.values())

    def reclaim(self, job_id: str) -> None:
        """Another party takes the job back (its lease expired) and queues it again:
        every write of its holder is refused from now on."""
        for held in (self.running, self.ahead):
            for lease in [x for x in held if x.job_id == job_id]:
                taken = held.pop(lease)
                self.queued.append(Waiting(taken.id, taken.task, taken.priority, taken.run_at))
        self.committed = {x for x in self.committed if x.job_id != job_id}

    def commit(self, lease: Lease) -> None:
        """The attempt's task completed its job in its own transaction."""
        del self.running[lease]
        self.committed.add(lease)

    def _called(self, method: str) -> None:
        self.calls.append(method)
        faults = self._faults.get(method)
        if faults:
            raise faults.pop(0)

    def _claim_one(
        self, waiting: Waiting, worker_id: str, lease: float, sent_at: float
    ) -> ClaimedJob:
        execution = self._executions.get(waiting.id, 0) + 1
        self._executions[waiting.id] = execution
        return ClaimedJob(
            id=waiting.id,
            task=waiting.task,
            queue="default",
            args={},
            attempt=waiting.attempts + 1,
            execution_id=execution,
            max_retries=3,
            retry_backoff=0.0,
            retry_backoff_max=0.0,
            checkpoint=None,
            lease_expires_at=lease,
            run_at=waiting.run_at,
            sent_at=sent_at,
            priority=waiting.priority,
            worker_id=worker_id,
        )

    def _take(self, n: int) -> list[Waiting]:
        best = sorted(self.queued, key=lambda w: (-w.priority, w.run_at, w.id))[: max(n, 0)]
        for waiting in best:
            self.queued.remove(waiting)
        return best

    # -- what the claimer calls ----------------------------------------------------------
    def claim(
        self,
        worker_id: str,
        queues: Sequence[str],
        limit: int | Callable[[], int],
        lease: float,
        now: float | None = None,
        ahead: int = 0,
    ) -> Claim:
        self._called("claim")
        if self.on_claim is not None:
            self.on_claim()
        sent_at = time.monotonic()
        slots = limit() if callable(limit) else limit
        self.claims.append(ClaimCall(tuple(queues), slots, ahead, lease))
        taken = [self._claim_one(w, worker_id, lease, sent_at) for w in self._take(slots)]
        taken += self.repeats
        self.repeats = []
        for claimed in taken:
            self.running[claimed.lease] = claimed
        buffered: list[ClaimedJob] = []
        if ahead > 0 and (slots <= 0 or len(taken) >= slots):
            buffered = [self._claim_one(w, worker_id, lease, sent_at) for w in self._take(ahead)]
            for claimed in buffered:
                self.ahead[claimed.lease] = claimed
        return Claim(taken, self.rate_wait, ahead=buffered, unanswered=self.unanswered)

    def start_ahead(
        self, leases: Sequence[Lease], lease: float, now: float | None = None
    ) -> list[Lease]:
        self._called("start_ahead")
        started = []
        for x in leases:
            if x in self.ahead and x.job_id not in self.refuse_start:
                self.running[x] = self.ahead.pop(x)
                started.append(x)
        return started

    def release(self, leases: Sequence[Lease], now: float | None = None) -> list[Lease]:
        self._called("release")
        lost = []
        for x in leases:
            given = self.running.pop(x, None) or self.ahead.pop(x, None)
            if given is None:
                lost.append(x)
                continue
            self.released.append(x)
            self.queued.append(Waiting(given.id, given.task, given.priority, given.run_at))
        return lost

    def task_policies(self, names: Sequence[str] | None = None) -> dict[str, TaskPolicy]:
        self._called("task_policies")
        return {n: p for n, p in self.declared.items() if names is None or n in names}

    # -- what the completer calls --------------------------------------------------------
    def finish(self, finishes: Sequence[Finish], now: float | None = None) -> list[Lease]:
        self._called("finish")
        batch = list(finishes)
        self.finish_batches.append(batch)
        if self.on_finish is not None:
            self.on_finish(batch)
        refused = [f.lease.job_id for f in batch if f.lease.job_id in self.refuse_data]
        if refused:
            raise ValueError(f"the database refused the finish of {refused}")
        lost = []
        for finish in batch:
            if self.running.pop(finish.lease, None) is None:
                lost.append(finish.lease)
            else:
                self.finished[finish.lease] = finish
        return lost

    def save_result(self, lease: Lease, result_json: str | None, lost: str | None = None) -> bool:
        self._called("save_result")
        if lease not in self.committed:
            return False
        self.committed.discard(lease)
        self.results[lease] = (result_json, lost)
        return True

    def pulse(
        self, reports: Sequence[PulseReport], now: float | None = None
    ) -> dict[Lease, RenewStatus]:
        self._called("pulse")
        self.pulses += reports
        return {r.lease: RenewStatus.RENEWED for r in reports if r.lease in self.running}

    def crash_attempt(
        self, lease: Lease, crash: dict[str, Any], detected_by: str, now: float | None = None
    ) -> Reclaimed | None:
        self._called("crash_attempt")
        claimed = self.running.pop(lease, None)
        if claimed is None:
            return None
        self.crashes.append((lease, crash, detected_by))
        return Reclaimed(
            job_id=claimed.id,
            execution_id=claimed.execution_id,
            worker_id=lease.worker_id,
            task=claimed.task,
            status=JobStatus.QUEUED,
            attempts=claimed.attempt,
            crash=crash,
            retry_delay=self.retry_delay_of_crash,
            outcome=Outcome.CRASHED,
        )


class FakeApp(heartq.App):
    """An app over a `FakeStore`: `App.store` opens no database."""

    def __init__(self, store: FakeStore) -> None:
        super().__init__("sqlite:///never-opened.db")
        self.fake_store = store

    @property
    def store(self) -> Any:
        return self.fake_store


@dataclass
class RecordingPool:
    """An execution pool that runs nothing: it records what it was asked (the test
    reports each attempt's end itself, as a pool's thread would)."""

    ends_timeouts = False
    started: list[list[RunningJob]] = field(default_factory=list)
    stopped: list[RunningJob] = field(default_factory=list)
    notified: list[RunningJob] = field(default_factory=list)

    def start(self, runs: Sequence[RunningJob]) -> None:
        self.started.append(list(runs))

    def stop(self, run: RunningJob) -> None:
        self.stopped.append(run)

    def notify(self, run: RunningJob) -> None:
        self.notified.append(run)

    def close(self) -> None: ...

    def ids(self) -> list[str]:
        """The ids of every job started, in order."""
        return [run.job.id for batch in self.started for run in batch]


SETTINGS = Settings(heartbeat_interval=5.0, lease=LEASE, poll_interval=1.0)
DOWN = StoreUnavailable("the database is down", reason="unavailable")


class RecordingStop(threading.Event):
    """The worker's stop: never set here; records each pause taken on it (seconds)."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        return self.is_set()


@dataclass
class Parts:
    """A claimer over a fake store, with the worker's other parts it reads and writes."""

    store: FakeStore
    claimer: Claimer
    ledger: Ledger
    pool: RecordingPool
    stop: RecordingStop
    app: FakeApp = field(repr=False)

    def end(self, *job_ids: str) -> None:
        """The attempts of these jobs end (their code returned): their slots free up."""
        for run in self.ledger.running():
            if run.job.id in job_ids:
                self.ledger.attempt_ended(run, AttemptEnd(Outcome.SUCCEEDED, result_json="1"))


def parts(
    concurrency: int = 2, queues: tuple[str, ...] = ("default",), heard: Heard | None = None
) -> Parts:
    """A claimer of an app over a fake store; `heard` hears the app's events."""
    store = FakeStore()
    app = FakeApp(store)
    app.task(name="t")(lambda: None)
    if heard is not None:
        heard.listen(app.events)
    ledger = Ledger(WORKER, concurrency, app.events)
    pool = RecordingPool()
    ledger.pool = pool
    stop = RecordingStop()
    claimer = Claimer(
        WORKER,
        app,
        ledger,
        settings=SETTINGS,
        health=StoreHealth(WORKER, app.events),
        queues=queues,
        stop=stop,
    )
    return Parts(store, claimer, ledger, pool, stop, app)
