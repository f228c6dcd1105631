"""The storage interface: every operation of the lease protocol, backend-neutral.

Workers, maintenance services, the client API and the command line talk to the database
only through `Store`. Both backends (SQLite and PostgreSQL) implement it with one shared
SQL store (`store/sql.py`) over each dialect's statements (`queries.py`), and one
conformance suite (`tests/conformance`) runs unchanged against every backend. Nothing
outside a backend may assume which database is behind it; differences show up as
capabilities (`supports_notify`, `liveness_grace`), never as `if backend == ...`.

Conventions every implementation keeps:

- All lease arithmetic uses the database's clock. Every time-dependent operation takes an
  optional `now` (seconds since the epoch): `None` means the database's own clock; tests
  pass a value to drive the protocol without sleeping.
- Every write on behalf of a running attempt is fenced on `(job_id, execution_id)` and
  `status = 'running'`. A write that matches no row changes nothing and is reported as lost.
- Batches are one statement per batch (claim, heartbeat, finish, release), whatever their
  size: the cost of a tick does not grow with the number of jobs.
- Reclaiming (reap, stale worker, dead process, restarted name) closes the execution as
  `crashed` with a crash context, and moves the job to `queued` with a backoff or to
  `dead`, in one transaction, so racing reclaimers reclaim each job exactly once.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


class JobStatus(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    DEAD = "dead"
    CANCELLED = "cancelled"


JOB_STATUSES: tuple[str, ...] = tuple(s.value for s in JobStatus)
"""Every job status, in the order tables and metrics show them."""

TERMINAL_STATUSES = frozenset({JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED})


class Outcome(enum.StrEnum):
    """How one execution (attempt) ended."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CRASHED = "crashed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    RELEASED = "released"


class RenewStatus(enum.StrEnum):
    """The heartbeat's answer for one job."""

    RENEWED = "renewed"
    LOST = "lost"
    CANCEL_REQUESTED = "cancel_requested"


class CancelResult(enum.StrEnum):
    CANCELLED = "cancelled"  # it was queued: it will never run
    CANCEL_REQUESTED = "cancel_requested"  # it is running: its worker is told at its next heartbeat
    ALREADY_FINISHED = "already_finished"


class DetectedBy(enum.StrEnum):
    """Which mechanism found a crashed attempt (kept in its crash context)."""

    LEASE_EXPIRED = "lease_expired"
    STALE_WORKER = "stale_worker"
    LIVENESS_LOCK = "liveness_lock"
    RECONCILIATION = "reconciliation"
    CHILD_EXIT = "child_exit"
    SELF_FENCE = "self_fence"  # the worker gave the job back after it stopped trusting it


@dataclass(frozen=True)
class Lease:
    """The fencing key of one attempt."""

    job_id: str
    execution_id: int


@dataclass(frozen=True)
class NewJob:
    task: str
    args_json: str
    queue: str = "default"
    priority: int = 0
    delay: float = 0.0
    max_retries: int = 3
    retry_backoff: float = 5.0
    retry_backoff_max: float = 3600.0
    id: str | None = None


@dataclass(frozen=True)
class ClaimedJob:
    id: str
    task: str
    queue: str
    args: dict[str, Any]
    attempt: int
    execution_id: int
    max_retries: int
    retry_backoff: float
    retry_backoff_max: float
    checkpoint: Any
    lease_expires_at: float
    run_at: float = 0.0  # when it became runnable; claim latency = claim time - run_at

    @property
    def lease(self) -> Lease:
        return Lease(self.id, self.execution_id)


@dataclass(frozen=True)
class Progress:
    value: float | None = None
    stage: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class Renewal:
    """One job in a heartbeat: renew its lease, and store its latest progress if any."""

    lease: Lease
    progress: Progress | None = None


@dataclass(frozen=True)
class Finish:
    """The end of one attempt, as the worker decided it (see `heartq.outcomes`)."""

    lease: Lease
    outcome: Outcome
    status: JobStatus  # queued (retry), succeeded, dead or cancelled
    result_json: str | None = None
    error: str | None = None
    retry_delay: float = 0.0
    dead_reason: str | None = None
    crash: dict[str, Any] | None = None


@dataclass(frozen=True)
class Reclaimed:
    """A job taken back from an attempt that crashed or whose lease expired."""

    job_id: str
    execution_id: int
    worker_id: str | None
    task: str
    status: JobStatus  # queued (will retry) or dead
    attempts: int
    crash: dict[str, Any]
    retry_delay: float = 0.0
    dead_reason: str | None = None


@dataclass(frozen=True)
class WorkerInfo:
    id: str
    hostname: str
    pid: int
    queues: tuple[str, ...]
    concurrency: int
    name: str | None = None
    # Seconds of silence after which this worker counts as stale (its own setting,
    # `Settings.stale_after_seconds`). Every observer judges the worker by it; None
    # leaves the observer's own threshold to apply.
    stale_after: float | None = None


@dataclass(frozen=True)
class StaleWorker:
    id: str
    name: str | None
    heartbeat_age: float
    reclaimed: tuple[Reclaimed, ...] = field(default=())


@dataclass(frozen=True)
class LiveNamesake:
    """Another worker of the same name, still alive: startup reconciliation leaves it
    its jobs (two processes were started with the same `--name`)."""

    id: str
    heartbeat_age: float


@dataclass(frozen=True)
class Reconciliation:
    """What startup reconciliation did: the jobs it took back from gone namesakes, and
    the namesakes it found alive and left alone."""

    reclaimed: list[Reclaimed]
    alive: list[LiveNamesake] = field(default_factory=list)


@dataclass(frozen=True)
class LivenessChange:
    """A liveness lock's session was lost (`lost` True, with the `error` that ended it)
    or the lock is held again (`lost` False, `after` seconds later). Reported by the
    backend's lock to whoever holds it, who logs it."""

    lost: bool
    error: str | None = None
    after: float | None = None


@dataclass(frozen=True)
class QueueWait:
    oldest_age: float | None  # seconds the oldest runnable job has waited; None if none
    oldest_job_id: str | None
    scheduled: int  # queued jobs whose run_at is still in the future


@dataclass(frozen=True)
class PruneCounts:
    workers: int = 0
    jobs: int = 0


class LivenessHandle(Protocol):
    """Held by a live worker; the OS or the database drops it the instant the process dies."""

    def release(self) -> None: ...


@runtime_checkable
class Store(Protocol):
    """Every operation of the protocol in docs/DESIGN.md. See the module docstring."""

    url: str  # with any password redacted: safe to print and log
    supports_notify: bool  # True when enqueues wake idle workers on other hosts
    # Seconds a worker's liveness lock must stay free, on consecutive probes, before a
    # probe believes the worker dead (0: the first free reading is believed).
    liveness_grace: float

    # -- lifecycle ---------------------------------------------------------------------
    def migrate(self) -> int:
        """Create or upgrade the schema; safe from many processes at once. Returns the version."""
        ...

    def close(self) -> None: ...

    def clock(self) -> float:
        """The database's current time, in seconds since the epoch."""
        ...

    # -- client ------------------------------------------------------------------------
    def enqueue(self, jobs: Sequence[NewJob], now: float | None = None) -> list[str]:
        """Insert all jobs in one transaction; returns their ids in order."""
        ...

    def get_job(self, job_id: str) -> dict[str, Any]:
        """The job with its executions, oldest first. Raises `JobNotFound`."""
        ...

    def list_jobs(
        self, status: str | None = None, queue: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]: ...

    def count_jobs(self) -> list[tuple[str, str, int]]:
        """`(queue, status, count)` for every non-empty pair."""
        ...

    def queue_waits(self, now: float | None = None) -> dict[str, QueueWait]:
        """Per queue: how long its oldest runnable job has waited, and how many wait for
        a later `run_at` (delays, retry backoffs). Cheap: it reads the claim index."""
        ...

    def cancel_job(self, job_id: str, now: float | None = None) -> CancelResult: ...

    def replay_dead(
        self, job_ids: Sequence[str] | None = None, now: float | None = None
    ) -> list[str]:
        """Requeue dead jobs (all of them when `job_ids` is None), keeping their history."""
        ...

    def purge_dead(self, older_than: float | None = None, now: float | None = None) -> int: ...

    # -- the worker's side of the protocol ---------------------------------------------
    def claim(
        self,
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        lease: float,
        now: float | None = None,
    ) -> list[ClaimedJob]:
        """Take up to `limit` runnable jobs, by priority (highest first) then age."""
        ...

    def heartbeat(
        self,
        worker_id: str,
        renewals: Sequence[Renewal],
        lease: float,
        now: float | None = None,
    ) -> dict[Lease, RenewStatus]:
        """Renew the worker's registry row and every listed lease in one statement."""
        ...

    def save_checkpoint(
        self, lease: Lease, checkpoint_json: str, now: float | None = None
    ) -> RenewStatus:
        """Store a checkpoint for the next attempt. Raises `LeaseLost` when fenced out."""
        ...

    def finish(self, finishes: Sequence[Finish], now: float | None = None) -> list[Lease]:
        """Record the end of many attempts in one fenced statement; returns the leases lost."""
        ...

    def release(self, leases: Sequence[Lease], now: float | None = None) -> list[Lease]:
        """Give jobs back on shutdown (no attempt counted); returns the leases lost."""
        ...

    # -- maintenance -------------------------------------------------------------------
    def reap_expired(
        self, detected_by: str, limit: int = 100, now: float | None = None
    ) -> list[Reclaimed]:
        """Reclaim up to `limit` running jobs whose lease has expired."""
        ...

    def reclaim_worker(
        self, worker_id: str, detected_by: str, reason: str, now: float | None = None
    ) -> list[Reclaimed]:
        """Reclaim every job a (dead) worker holds, and mark the worker inactive."""
        ...

    def reclaim_by_name(
        self,
        name: str,
        except_worker_id: str,
        detected_by: str,
        now: float | None = None,
        stale_after: float | None = None,
    ) -> Reconciliation:
        """Startup reconciliation: reclaim what earlier workers of this name still hold.

        Only namesakes that are gone are reclaimed (and marked inactive): their liveness
        lock is free (or they never took one), or they are silent for longer than their
        own `stale_after` (else `stale_after` given here; None: no fallback). A live
        namesake (two processes started with the same name) keeps its jobs; it is
        returned in `alive` and left untouched (the caller logs `namesake_alive`)."""
        ...

    def crash_attempt(
        self, lease: Lease, crash: dict[str, Any], detected_by: str, now: float | None = None
    ) -> Reclaimed | None:
        """Close one attempt as crashed at once (a child process died). None if lost."""
        ...

    def register_worker(self, info: WorkerInfo, now: float | None = None) -> None: ...

    def stop_worker(self, worker_id: str, now: float | None = None) -> None: ...

    def mark_stale_workers(
        self, stale_after: float, detected_by: str, now: float | None = None
    ) -> list[StaleWorker]:
        """Mark workers silent for longer than their own recorded `stale_after` (else the
        `stale_after` given here) inactive and reclaim their jobs."""
        ...

    def list_workers(self, include_all: bool = False) -> list[dict[str, Any]]: ...

    def prune(
        self, worker_retention: float, job_retention: float, now: float | None = None
    ) -> PruneCounts: ...

    # -- liveness locks (the fast path) ------------------------------------------------
    def liveness_hold(
        self, worker_id: str, on_change: Callable[[LivenessChange], None] | None = None
    ) -> LivenessHandle:
        """Take this worker's liveness lock; keep the handle for the worker's life.
        `on_change` hears when a lock that lives on a database session is lost with its
        session and taken again (never for a lock the OS holds)."""
        ...

    def liveness_probe(self, detected_by: str, now: float | None = None) -> list[StaleWorker]:
        """Find active workers whose process is gone (lock free), reclaim their jobs."""
        ...

    def liveness_suspects(self) -> dict[str, float]:
        """Workers this store instance found with a free lock, not yet for the whole
        `liveness_grace`: worker id -> database time it was first found free. A one-shot
        caller (`heartq reap`) waits out the grace once and probes again."""
        ...

    def listen(self, on_wake: Callable[[], None]) -> LivenessHandle | None:
        """Call `on_wake()` when jobs become available; None if the backend cannot tell
        (`supports_notify` False: workers then poll)."""
        ...
