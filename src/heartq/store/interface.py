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

import contextlib
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
    INTERRUPTED = "interrupted"  # its worker lost the database; not counted as an attempt
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
    """A job to insert, its policy resolved (`heartq.policy.resolve`). `chosen` says which
    of queue, priority, max_retries and backoff its caller chose (bits of `heartq.policy`;
    all of them unless said otherwise): the others follow the task's declaration, even
    one made after the enqueue. `run_at`
    (seconds since the epoch) wins over `delay` when given (an `eta`).

    `unique_key`: while a job with this key is queued or running, and, with
    `unique_for` (seconds), while one finished less than that long ago, the enqueue
    stores nothing and answers that job's id. `schedule`: the periodic schedule whose
    tick this job is (only stored with a `unique_key`: a tick always has one).

    `concurrency_key` with `concurrency_limit` (both or neither): at most that many jobs
    with this key run at once, across every worker (enforced by the claim)."""

    task: str
    args_json: str
    queue: str = "default"
    priority: int = 0
    delay: float = 0.0
    max_retries: int = 3
    retry_backoff: float = 5.0
    retry_backoff_max: float = 3600.0
    id: str | None = None
    chosen: int = 15  # every option (policy.ALL_CHOSEN): `App` says which it resolved
    run_at: float | None = None
    unique_key: str | None = None
    unique_for: float | None = None
    schedule: str | None = None
    concurrency_key: str | None = None
    concurrency_limit: int | None = None


@dataclass(frozen=True)
class TickPlan:
    """What a periodic schedule enqueues now (`heartq.periodic.Schedule.plan`): its due
    `ticks` (seconds since the epoch, oldest first), the `last_tick` the fleet has then
    dealt with, and its `next_tick`."""

    ticks: list[float]
    last_tick: float | None
    next_tick: float | None


@dataclass(frozen=True)
class JobEnd:
    """Where a job stands for someone waiting on it: its status and, once it ended, its
    result (succeeded) or its last error (dead, cancelled)."""

    job_id: str
    status: JobStatus
    result: Any = None
    error: str | None = None
    dead_reason: str | None = None
    result_pending: bool = False  # completed in its task's transaction; result to come

    @property
    def ended(self) -> bool:
        return self.status in TERMINAL_STATUSES and not self.result_pending


@dataclass(frozen=True)
class TaskPolicy:
    """A task's options as a worker declared them (`Store.declare_tasks`): where its jobs
    go and how they are retried and timed, for whoever enqueues it by name."""

    name: str
    queue: str
    priority: int
    max_retries: int
    retry_backoff: float
    retry_backoff_max: float
    timeout: float | None = None
    heartbeat_timeout: float | None = None
    declared_at: float | None = None  # database time of the last declaration
    declared_by: str | None = None  # the worker id that made it


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
    chosen: int = 0  # the options its caller chose (bits of `heartq.policy`)
    sent_at: float = 0.0
    """This process's monotonic time when the claiming statement went to the database,
    after any wait for a connection or a lock: the start of the worker's trust in the
    lease. Measured before that wait, a claim that waited (a server restart, a busy
    SQLite file) would start its trust already spent and be given up at once."""

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
    queue: str = ""


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
    suspected: list[str] = field(default_factory=list)
    """Namesakes whose liveness lock was found free, but not yet for the store's
    `liveness_grace`: a dropped session under a live worker looks the same for a moment.
    Their jobs stay; the caller judges again once the grace has passed."""


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
class JobPage:
    """One page of `browse_jobs`: its jobs, newest first, and where the next page starts
    (`next_before`, None at the oldest job). A page reads at most `scan` jobs of the
    primary key, so a filter that matches few jobs may answer a short page (even an empty
    one) with a `next_before`: the rest lies further back."""

    jobs: list[dict[str, Any]]
    next_before: str | None


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

    def reach(self) -> None:
        """One attempt to reach the database, at once. Raises `StoreRefused` (or
        `ConfigError`) for what waiting will not fix, `StoreUnavailable` for what may pass
        (down, full, starting up, locked). A worker waits for its database with it."""
        ...

    def resize_pool(self, size: int) -> None:
        """At most `size` pooled connections from now on (nothing to do without a pool)."""
        ...

    def clock(self) -> float:
        """The database's current time, in seconds since the epoch."""
        ...

    # -- client ------------------------------------------------------------------------
    def enqueue(
        self, jobs: Sequence[NewJob], now: float | None = None, connection: Any = None
    ) -> list[str]:
        """Insert all jobs in one transaction; returns their ids in order. With
        `connection` (the caller's own, in its open transaction: a `sqlite3.Connection`
        on the queue's file, a `psycopg.Connection`), the jobs are written there and exist
        if and only if the caller commits; wake-ups go out with that commit."""
        ...

    async def enqueue_async(self, jobs: Sequence[NewJob], connection: Any) -> list[str]:
        """`enqueue` into the open transaction of an asyncio connection (a
        `psycopg.AsyncConnection`); `ConfigError` where the backend has none."""
        ...

    def get_job(self, job_id: str) -> dict[str, Any]:
        """The job with its executions, oldest first, and the policy in force with where
        each part of it comes from. Raises `JobNotFound`."""
        ...

    # -- waiting for a job's end -------------------------------------------------------
    def await_end(self, job_id: str) -> JobEnd:
        """Mark the job awaited (its end will be announced to `listen_ends`) and return
        where it stands now. Raises `JobNotFound`."""
        ...

    def job_end(self, job_id: str) -> JobEnd:
        """Where the job stands now (a cheap read). Raises `JobNotFound`."""
        ...

    def listen_ends(self, on_end: Callable[[str | None], None]) -> LivenessHandle | None:
        """Call `on_end(job_id)` when an awaited job ends, `on_end(None)` when ends may
        have been missed (the session was re-opened); None if the backend cannot tell
        (waiters then poll)."""
        ...

    # -- task declarations -------------------------------------------------------------
    def declare_tasks(
        self, policies: Sequence[TaskPolicy], worker_id: str, now: float | None = None
    ) -> list[str]:
        """Record the tasks a worker runs (insert or update, in one transaction); returns
        the names whose declaration is new or changed (their waiting jobs need
        `reroute_jobs`). Committed on its own, before the re-route: see `reroute_jobs`."""
        ...

    def reroute_jobs(
        self, names: Sequence[str], now: float | None = None, job_ids: Sequence[str] | None = None
    ) -> int:
        """Apply the current declaration of these tasks to their queued jobs, for every
        option their caller did not choose (queue, priority, retries, backoff); wakes the
        queues they move to; only the jobs `job_ids` when given. Returns how many jobs
        changed.

        Why a transaction of its own, after the declaration's: an enqueue that read no
        declaration either committed before this one began (and is re-routed here), or
        began after the declaration committed and re-checks it after its commit
        (`App` calls this for its own jobs then). Either way no job of a declared task
        is left with the defaults."""
        ...

    def task_policies(self, names: Sequence[str] | None = None) -> dict[str, TaskPolicy]:
        """The declared tasks among `names` (all of them when None), by name."""
        ...

    def list_jobs(
        self, status: str | None = None, queue: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]: ...

    def browse_jobs(
        self,
        status: str | None = None,
        queue: str | None = None,
        task: str | None = None,
        before: str | None = None,
        limit: int = 50,
        scan: int = 10_000,
    ) -> JobPage:
        """Jobs by id, newest first (heartq's ids are time-ordered), those matching the
        filters, from the first id below `before`: a keyset page of the primary key that
        reads at most `scan` jobs, whatever the table holds (the dashboard's job list).
        Ids a caller chose sort by their text."""
        ...

    def finished_per_minute(
        self, minutes: int = 60, now: float | None = None
    ) -> list[tuple[float, str, int]]:
        """`(minute, status, count)` of the jobs that ended (succeeded, dead, cancelled)
        in the last `minutes` minutes, `minute` being its start (seconds since the epoch):
        a range of the index of finished jobs."""
        ...

    def list_schedules(self) -> list[dict[str, Any]]:
        """The periodic schedules workers have run, by name: `name`, `task`, `spec`,
        `last_tick`, `next_tick` (seconds since the epoch, or None), `last_job_id`,
        `updated_at`, `updated_by`."""
        ...

    def tick_schedule(
        self,
        name: str,
        task: str,
        spec: str,
        plan: Callable[[float | None, float], TickPlan],
        make_jobs: Callable[[Sequence[float]], Sequence[NewJob]],
        by: str,
        now: float | None = None,
    ) -> list[str]:
        """Enqueue a schedule's due ticks, once across the fleet: with the schedule's row
        locked, `plan(last_tick, now)` says which ticks are due (by the database's clock),
        `make_jobs(ticks)` makes their jobs (each with its tick's unique key), and the row
        moves on, all in one transaction. Returns the ids of the ticks' jobs."""
        ...

    def count_jobs(self) -> list[tuple[str, str, int]]:
        """`(queue, status, count)` for every non-empty pair."""
        ...

    def has_pending(self, queues: Sequence[str], now: float | None = None) -> bool:
        """Whether a job of these queues is running (on any worker), runnable, or waiting
        out a retry's backoff: what `heartq worker --burst` waits for before it exits. A
        first attempt delayed into the future (`delay`, `eta`) is not waited for."""
        ...

    def concurrency_usage(self) -> list[dict[str, Any]]:
        """Per concurrency key with jobs queued or running: `key`, `running`, `queued`
        and `limit` (the largest limit its jobs carry), busiest first; for `heartq stats`."""
        ...

    def queue_waits(self, now: float | None = None) -> dict[str, QueueWait]:
        """Per queue: how long its oldest runnable job has waited, and how many wait for
        a later `run_at` (delays, retry backoffs). Cheap: it reads the claim index."""
        ...

    def cancel_job(
        self, job_id: str, now: float | None = None, by: str | None = None
    ) -> CancelResult:
        """Cancel a queued job at once, or request a running job's cancel; `by` (who
        asked) is kept with the job as `cancelled_by`."""
        ...

    def replay_dead(
        self, job_ids: Sequence[str] | None = None, now: float | None = None
    ) -> list[str]:
        """Requeue dead jobs (all of them when `job_ids` is None), keeping their history."""
        ...

    def purge_dead(self, older_than: float | None = None, now: float | None = None) -> int: ...

    def purge_dead_ids(
        self, older_than: float | None = None, now: float | None = None, dry_run: bool = False
    ) -> list[str]:
        """`purge_dead`, answering the ids; `dry_run`: those it would purge, kept."""
        ...

    def resolve_job_id(self, ref: str) -> str:
        """The full id of the job `ref` names (its id in any case, or a unique prefix, else
        tail, of at least 8 characters); `JobNotFound`, or `AmbiguousJobId` when shared."""
        ...

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

    def claim_ids(
        self,
        worker_id: str,
        ids: Sequence[str],
        lease: float,
        now: float | None = None,
    ) -> list[ClaimedJob]:
        """Claim, as `claim` does, those of `ids` that are queued, runnable and have no
        concurrency key (a transport's messages name them; any other id claims nothing)."""
        ...

    def due_for_publish(
        self,
        queues: Sequence[str],
        since: float,
        stale_before: float,
        limit: int,
        now: float | None = None,
    ) -> tuple[list[tuple[str, str]], float]:
        """`(job id, queue)` of queued, runnable, unkeyed jobs of `queues` that fell due or
        were requeued after `since`, or are runnable since `stale_before`; and the
        database's time (a transport's sweeper publishes them)."""
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

    def completing(self, lease: Lease) -> contextlib.AbstractContextManager[Any]:
        """A write transaction lent to a task (`ctx.transaction()`): it writes its effects
        on the connection given; when the block ends the job is completed `succeeded` in
        the same transaction, fenced on the lease; if this attempt no longer holds the
        job, everything rolls back and `LeaseLost` is raised."""
        ...

    def save_result(self, lease: Lease, result_json: str | None) -> bool:
        """Store the result of a job its task completed in `completing` (None: its code
        failed after the commit), fenced on the lease and the result still pending;
        waiters (`App.result`) are told. Whether it landed."""
        ...

    def finish(self, finishes: Sequence[Finish], now: float | None = None) -> list[Lease]:
        """Record the end of many attempts in one fenced statement; returns the leases lost."""
        ...

    def release(self, leases: Sequence[Lease], now: float | None = None) -> list[Lease]:
        """Give jobs back on shutdown (no attempt counted); returns the leases lost."""
        ...

    # -- maintenance -------------------------------------------------------------------
    def reap_expired(
        self,
        detected_by: str,
        limit: int = 100,
        now: float | None = None,
        observer: str | None = None,
    ) -> list[Reclaimed]:
        """Reclaim up to `limit` running jobs whose lease has expired.

        With `observer` (the reaping worker's id), nothing is reaped unless that worker
        has been in unbroken contact with the database for its own `stale_after`: after a
        pause of the database every lease looks expired, and their holders need one
        heartbeat to renew them (docs/DESIGN.md, "A pause is not a death")."""
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
        lock is free (or they never took one; for the store's `liveness_grace`, else they
        are only `suspected`), or they are silent for longer than their own `stale_after`
        (else `stale_after` given here; None: no fallback), silence being judged, as the
        monitor judges it, only once `except_worker_id` (the starting worker, when
        registered) has been in unbroken contact for that long. A live
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
        self,
        stale_after: float,
        detected_by: str,
        now: float | None = None,
        observer: str | None = None,
    ) -> list[StaleWorker]:
        """Mark workers silent for longer than their own recorded `stale_after` (else the
        `stale_after` given here) inactive and reclaim their jobs.

        With `observer` (the judging worker's id), a worker is judged only if the observer
        has been in unbroken contact with the database for at least the judged worker's
        threshold: silence the observer could not have heard is no evidence."""
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

    def liveness_probe(
        self, detected_by: str, now: float | None = None, observer: str | None = None
    ) -> list[StaleWorker]:
        """Find active workers whose process is gone (lock free), reclaim their jobs;
        `observer`, the probing worker, is named in their crash context."""
        ...

    def liveness_suspects(self) -> dict[str, float]:
        """Workers this store instance found with a free lock, not yet for the whole
        `liveness_grace`: worker id -> database time it was first found free. A one-shot
        caller (`heartq reap`) waits out the grace once and probes again."""
        ...

    def liveness_free(self, worker_ids: Sequence[str]) -> list[str]:
        """Which of these active workers' liveness locks are free right now: their
        process is gone. Read only: nothing is reclaimed and no grace is waited out
        (operator commands show such a worker as gone until a reaper reclaims it)."""
        ...

    def listen(self, on_wake: Callable[[], None]) -> LivenessHandle | None:
        """Call `on_wake()` when jobs become available; None if the backend cannot tell
        (`supports_notify` False: workers then poll)."""
        ...
