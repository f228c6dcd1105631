"""The job model: what a job, an attempt, a lease and a worker are, for every part of heartq.

These are plain values (enums and frozen dataclasses; the two a worker makes for every
job, `ClaimedJob` and `Finish`, read-only by convention), imported by the client API, the
worker, the store, the maintenance services, the command line and the dashboard alike.
This module imports nothing of heartq: it is the ground floor, so no import ever runs
back up from the model to the parts that use it. The operations on these values are the
store's roles (`heartq.store.interface`); what becomes of a job after an attempt ends is
`heartq.lifecycle`.

The vocabulary, once each:

- `JobStatus`: where a job stands (waiting, blocked, queued, running, succeeded, dead,
  cancelled).
- `Outcome`: how one attempt (an execution) ended, as stored with it (`STORED_OUTCOMES`;
  `LOST`, the worker's "report nothing", is never stored).
- `Lease`: the fencing key of one attempt, `(job id, execution id)`.
- `NewJob` (to enqueue), `ClaimedJob` (an attempt starting), `Claim` (what one claim
  took, and how long rate limits hold the rest back), `Finish` (an attempt's end as the
  worker decided it), `Reclaimed` (an attempt ended by someone else: a crash).
- `WorkerInfo`, `DeactivatedWorker`, `LiveNamesake`, `Reconciliation`: the worker registry.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


class JobStatus(enum.StrEnum):
    WAITING = "waiting"  # for its dependencies (`depends_on`) to succeed
    BLOCKED = "blocked"  # a dependency ended dead (or is blocked): waits for its replay
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    DEAD = "dead"
    CANCELLED = "cancelled"


JOB_STATUSES: tuple[str, ...] = tuple(s.value for s in JobStatus)
"""Every job status, in the order tables and metrics show them."""

TERMINAL_STATUSES = frozenset({JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED})


class Outcome(enum.StrEnum):
    """How one execution (attempt) ended: the one word for it in the worker, the store,
    the events and the docs. Every member but `LOST` is stored with its execution."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"  # the task raised (or could not run)
    CRASHED = "crashed"  # its worker or child process died, or its lease expired
    INTERRUPTED = "interrupted"  # its worker lost the database; not counted as an attempt
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    RELEASED = "released"
    """The lease given back, not counted as an attempt: at a graceful shutdown, a job
    claimed ahead and never started, or one whose task this worker does not know (then
    its `Finish` waits for a worker that knows it: `Finish.waits_for_task`)."""
    SNOOZED = "snoozed"
    """The task said it is too early (`heartq.Snooze`): the job is queued again after
    the delay it asked for, not counted as an attempt, while the job has snoozed fewer
    than its task's `max_snoozes` times (a snooze past that is a `FAILED` attempt)."""
    LOST = "lost"
    """The worker's word only, never stored: its lease is gone or untrusted, so the worker
    reports nothing of the attempt; whoever took the job closes the execution (`crashed`
    or `interrupted`), or the job's new attempt simply went on."""


STORED_OUTCOMES = frozenset(o for o in Outcome if o is not Outcome.LOST)
"""The outcomes an execution row may hold (the `CHECK` of every backend's schema)."""


class RenewStatus(enum.StrEnum):
    """The heartbeat's answer for one job."""

    RENEWED = "renewed"
    LOST = "lost"
    CANCEL_REQUESTED = "cancel_requested"


class CancelResult(enum.StrEnum):
    CANCELLED = "cancelled"  # it was queued, waiting or blocked: it will never run
    CANCEL_REQUESTED = "cancel_requested"  # it is running: its worker is told within ~1 s
    ALREADY_FINISHED = "already_finished"


class DetectedBy(enum.StrEnum):
    """Which mechanism found a crashed attempt (kept in its crash context)."""

    LEASE_EXPIRED = "lease_expired"
    STALE_WORKER = "stale_worker"
    LIVENESS_LOCK = "liveness_lock"
    RECONCILIATION = "reconciliation"
    CHILD_EXIT = "child_exit"
    SELF_FENCE = "self_fence"  # the worker gave the job back after it stopped trusting it


class DependencyFailure(enum.StrEnum):
    """What becomes of a waiting job when one of its dependencies ends dead or cancelled
    (`on_dependency_failure=`). A cancelled dependency cancels the job unless it runs
    anyway: a cancel is final, nothing can replay it."""

    BLOCK = "block"  # a dead dependency blocks the job until it is replayed (the default)
    CANCEL = "cancel"  # the job ends cancelled, `dependency_failed: job X ended dead`
    RUN = "run"  # the failed dependency counts as satisfied: the job runs anyway


@dataclass(frozen=True)
class Lease:
    """The fencing key of one attempt: its job, its execution id and the worker that
    claimed it. Every write of the attempt's holder (a renewal, a pulse, a checkpoint, a
    finish, a release, a completion, a crash it reports) matches only a job still running
    under that execution *and* that worker (docs/design/database-bad-days.md, "A failover that
    forgets a claim"): a database that forgot a claim (a failover to an asynchronous standby, a
    restore) issues its execution id again, but never to the same worker process, whose
    id is fresh (`heartq.ids.new_worker_id`); a worker handed a lease it still holds an
    attempt of gives that claim back unstarted (`Ledger.set_apart_repeats`).

    `worker_id` is not part of a lease's identity (equality, hash): a worker's leases
    all carry its own id, so the job and the execution tell them apart, and the answers
    of the store (the rows a fenced statement changed) compare with the leases sent
    without carrying the worker back. None: a holder that does not know its worker's id
    (a lease made by hand), fenced on the execution alone."""

    job_id: str
    execution_id: int
    worker_id: str | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class AttemptRef:
    """Which attempt of which job: the one value that names an attempt to everything
    that tells of it (the task's `JobContext`, the attempt hooks' `AttemptInfo`, the
    crash hooks' `CrashInfo`), made where the attempt is known (`ClaimedJob.ref_for`,
    `Reclaimed.ref`) and handed on, never copied field by field. `worker_id`: the worker
    that holds, or held, the attempt."""

    job_id: str
    task: str
    queue: str
    attempt: int
    execution_id: int
    worker_id: str | None

    @property
    def lease(self) -> Lease:
        """The attempt's fencing key."""
        return Lease(self.job_id, self.execution_id, self.worker_id)


class NamesAnAttempt:
    """`job_id`, `task`, `queue`, `attempt`, `execution_id` and `worker_id` read from the
    holder's `ref` (`AttemptRef`): the views of an attempt keep their flat names for
    their readers while holding one value."""

    ref: AttemptRef

    @property
    def job_id(self) -> str:
        return self.ref.job_id

    @property
    def task(self) -> str:
        return self.ref.task

    @property
    def queue(self) -> str:
        return self.ref.queue

    @property
    def attempt(self) -> int:
        return self.ref.attempt

    @property
    def execution_id(self) -> int:
        return self.ref.execution_id

    @property
    def worker_id(self) -> str | None:
        return self.ref.worker_id


class NamesARunningAttempt(NamesAnAttempt):
    """`NamesAnAttempt` for an attempt a worker runs now: its `worker_id` is that
    worker's (a `JobContext`, an `AttemptInfo`)."""

    @property
    def worker_id(self) -> str:
        worker_id = self.ref.worker_id
        if worker_id is None:  # made by `ClaimedJob.ref_for`, which always names one
            raise ValueError(f"attempt {self.ref.job_id} names no worker")
        return worker_id


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
    with this key run at once, across every worker (enforced by the claim).

    `rate_key` with `rate_limit` and `rate_period` (all or none): at most `rate_limit`
    attempts of jobs with this key start in any `rate_period` seconds, across every
    worker (enforced by the claim; `heartq.rates` reads `"100/m"`)."""

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
    rate_key: str | None = None
    rate_limit: int | None = None
    rate_period: float | None = None
    fair_key: str | None = None
    """Its share of its queue's slots (`heartq.store.sql.fair`): among runnable jobs of
    one priority, claims take keys in turn, in proportion to `fair_weight` (None: 1);
    None: the one share of jobs without a key."""
    fair_weight: float | None = None
    meta_json: str | None = None
    """The job's metadata, a JSON object (the caller's `meta=`, what enqueue hooks
    added), or None for none."""
    expires_in: float | None = None
    """Seconds from the enqueue (on the database's clock) by which the job must have
    started (`expires=`); a job claimed later ends cancelled without running, no attempt
    counted. None: it never expires."""
    depends_on: tuple[str, ...] = ()
    """Jobs this one waits for (`waiting`) until each has succeeded: existing jobs, or
    jobs of the same batch or transaction. Empty: it is `queued` at once."""
    on_dependency_failure: DependencyFailure = DependencyFailure.BLOCK
    dependency_results: bool = False
    """Its task receives its dependencies' results as its first argument (a group's
    callback, `heartq.group`; a pipeline's step that takes the previous step's result,
    `Signature.takes_result`): a list, in `depends_on`'s order."""
    results_of: tuple[str, ...] | None = None
    """With `dependency_results`: the dependencies whose results it receives (a subset of
    `depends_on`, which keeps their order); the others are only waited for. None: every
    one of them."""
    one_result: bool = False
    """With `dependency_results`: it receives the result of its one dependency in
    `results_of` as it is, not in a list (a step after a single job)."""


@dataclass(frozen=True)
class Pipeline:
    """What a pipeline's `enqueue` returns (`heartq.chain`, `heartq.group`, a
    `heartq.Signature` alone): the id of every job it stored, in the order they were
    written; `tail`, the jobs a job enqueued after it waits for (`depends_on=` takes the
    pipeline itself): a chain's last step, a group's callback, or a group's members when
    it has none; `last`, the last of them (a chain's result is its job's)."""

    ids: tuple[str, ...]
    tail: tuple[str, ...]

    @property
    def last(self) -> str:
        """The last job of `tail`; an `IndexError` that says why for a pipeline that
        stored none (an empty group without a callback, done at once: there is no job to
        wait for, and no result but the `[]` a step after it would take)."""
        if not self.tail:
            raise IndexError(
                "this pipeline stored no job (an empty group without a callback is done at "
                "once): it has no last job to wait for; its result, for a step after it, "
                "is []"
            )
        return self.tail[-1]


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
    result (succeeded) or its last error (dead, cancelled); for a blocked job, the dead
    job that holds it (`held_by`: the root of the failure, however far up the pipeline),
    whose error is the answer until an operator replays it."""

    job_id: str
    status: JobStatus
    result: Any = None
    error: str | None = None
    dead_reason: str | None = None
    result_pending: bool = False  # completed in its task's transaction; result to come
    held_by: JobEnd | None = None
    cancelled_by: str | None = None  # who asked for its cancel, as stored
    result_lost: str | None = None
    """Why a succeeded job has no result (`heartq.lost_results`); None: it has its own."""

    @property
    def ended(self) -> bool:
        """Whether a waiter has its answer: the job ended, or a dead job holds it."""
        if self.held_by is not None:
            return True
        return self.status in TERMINAL_STATUSES and not self.result_pending


@dataclass(frozen=True)
class DependencyEnd:
    """One dependency of a job whose task takes their results (a group's callback), as
    its worker reads it before the call: its status (None: no such job any more), its
    result, whether that result is still to come (`pending`: its task completed it
    inside `ctx.transaction()` and saves what it returned just after), and why it was
    lost (`lost`: the result was given up, or went with its pruned job)."""

    job_id: str
    status: JobStatus | None
    result: Any = None
    pending: bool = False
    as_value: bool = False
    """Its result is passed as it is, not as an item of a list (`NewJob.one_result`)."""
    lost: str | None = None


@dataclass(frozen=True)
class JobMatch:
    """A job a shortened id names (`Store.resolve_job_id`): enough for an operator to tell
    which of several they meant."""

    id: str
    task: str
    status: str


@dataclass(frozen=True)
class TaskParameter:
    """One parameter of a task's function as its worker declared it: enough to tell
    whether a job's arguments can be passed to it (`heartq.arguments`), nothing of its
    type or default value (those live with the code). `kind` is the name of an
    `inspect.Parameter` kind in lower case: `positional_or_keyword`, `keyword_only`,
    `var_keyword`, `var_positional`, `positional_only`."""

    name: str
    kind: str
    has_default: bool = False


@dataclass(frozen=True)
class TaskPolicy:
    """A task's options as a worker declared them (`Store.declare_tasks`): where its jobs
    go and how they are retried and timed, for whoever enqueues it by name; and its
    `parameters` (None: not declared, by a worker of a version before they were), against
    which an enqueue by name is checked. `rate_limit` (a spec, `"100/m"`) and `rate_key`
    (a template of the job's arguments; None: the task's name) limit its starts.
    `retry_schedule` and `retry_jitter` (or `retry_intervals`) shape its waits between
    attempts, `retry_on` (None: every exception) and `dont_retry_on` name the exceptions
    worth another attempt (`heartq.lifecycle.retry`)."""

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
    parameters: tuple[TaskParameter, ...] | None = None
    rate_limit: str | None = None
    rate_key: str | None = None
    retry_schedule: str = "exponential"  # heartq.lifecycle.retry.SCHEDULES
    retry_jitter: bool = True
    retry_on: tuple[str, ...] | None = None
    dont_retry_on: tuple[str, ...] = ()
    retry_intervals: tuple[float, ...] | None = None
    """The task's explicit waits after each failed attempt (None: `retry_schedule`'s)."""
    retry_delay: bool = False
    """The task has a `retry_delay` function, which its worker asks first for the wait
    before a retry (the function is the worker's; what is declared is that it has one,
    so `heartq jobs show` can say who decides)."""
    unique: bool = False
    """Its jobs are keyed by their task and arguments (`heartq.arguments.unique_args_key`),
    with the window `unique_for` (None: while one is queued or running)."""
    unique_for: float | None = None
    expires: float | None = None
    """Seconds after a job's first due time by which it must have started, given to each
    job an enqueue makes without an `expires` of its own (None: no expiry)."""


@dataclass(slots=True)
class ClaimedJob:
    """One attempt's job as a claim took it. Read-only by convention, not frozen (like
    `Finish`): a worker makes one of each per job, and a frozen dataclass's `__init__`
    sets each field through `object.__setattr__`, which made a no-op job's claimed job
    (20 fields) cost twice as much to build as the claim's row to read. Slots, not a
    `__dict__`: one object less to make and free per job."""

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
    meta: Mapping[str, Any] = field(default_factory=dict)
    """The job's metadata (`NewJob.meta_json`), for `ctx.meta` and attempt hooks."""
    dependency_results: bool = False
    """Its task takes its dependencies' results as its first argument (`NewJob`): the
    worker reads them before it calls the task."""
    sent_at: float = 0.0
    """This process's monotonic time when the claiming statement went to the database,
    after any wait for a connection or a lock: the start of the worker's trust in the
    lease. Measured before that wait, a claim that waited (a server restart, a busy
    SQLite file) would start its trust already spent and be given up at once."""
    priority: int = 0
    """Its priority: a worker starts the jobs it claimed ahead best first."""
    worker_id: str | None = None
    """The worker that claimed it: part of its lease, the fencing key."""
    retry_schedule: str = "exponential"
    retry_jitter: bool = True
    retry_intervals: tuple[float, ...] | None = None
    """The shape of its waits between attempts (`heartq.lifecycle.retry.Backoff`): its
    task's, as the worker running it declares it (`heartq.policy.for_attempt`)."""
    snoozes: int = 0
    """How many times the job snoozed (`heartq.Snooze`) since it was enqueued or
    replayed: its `snoozes` column, as the claim read it."""
    max_snoozes: int = 100
    """Its task's bound on snoozes not counted as attempts, as the worker running it
    defines the task (`heartq.policy.for_attempt`; not declared: only the worker reads
    it), 100 if it does not know the task (`heartq.lifecycle.retry.DEFAULT_MAX_SNOOZES`)."""
    expires_by: float | None = None
    """This process's monotonic time past which the job may not start (its `expires_at`
    less the claim's statement time, from `sent_at`: no clock of this host compared with
    the database's); None: it never expires. A job claimed ahead is judged when it would
    start (`heartq.worker.claimer`)."""

    lease: Lease = field(init=False, repr=False, compare=False)
    """Its fencing key, made once with the job: a worker looks it up a dozen times per
    attempt (each a dataclass to build and hash)."""

    def __post_init__(self) -> None:
        self.lease = Lease(self.id, self.execution_id, self.worker_id)

    def ref_for(self, worker_id: str) -> AttemptRef:
        """This attempt's identity as `worker_id` runs it (`AttemptRef`), for its context
        and hooks: made when asked, not with every claimed job."""
        return AttemptRef(
            self.id, self.task, self.queue, self.attempt, self.execution_id, worker_id
        )


class Claim(list[ClaimedJob]):
    """What a claim took: the claimed jobs in claim order (a list, as ever), and
    `rate_wait`, seconds until a runnable job that a rate limit held back may start (None:
    no rate limit held one back). A worker that did not fill its slots sleeps that long
    rather than a whole poll interval, and no shorter: a limited backlog costs it no
    claims in between (docs/design/limits.md, "Rate limits")."""

    def __init__(
        self,
        jobs: Iterable[ClaimedJob] = (),
        rate_wait: float | None = None,
        ahead: Iterable[ClaimedJob] = (),
        unanswered: bool = False,
    ) -> None:
        super().__init__(jobs)
        self.rate_wait = rate_wait
        self.ahead = list(ahead)
        """The jobs claimed ahead (`claim(ahead=...)`), in claim order: held under the
        lease, not started; `start_ahead` records their start before they run."""
        self.unanswered = unanswered
        """A statement of this claim raised after the others committed (the claim ahead,
        on PostgreSQL): it may have committed too, its jobs running under the worker
        unknown to it, so the worker's next heartbeat sweeps (docs/design/leases.md, "Leases
        and heartbeats")."""


@dataclass(frozen=True)
class Progress:
    value: float | None = None
    stage: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class Report:
    """What a running task last reported, as the worker's pulse writes it: its progress
    (None: none reported) and its checkpoint (`has_checkpoint`: one was reported in this
    attempt; `checkpoint_json` is its JSON text, possibly `null`)."""

    progress: Progress | None = None
    checkpoint_json: str | None = None
    has_checkpoint: bool = False

    @property
    def empty(self) -> bool:
        return self.progress is None and not self.has_checkpoint


@dataclass(frozen=True)
class PulseReport:
    """One attempt in a pulse: what its task reported since the last pulse that landed."""

    lease: Lease
    report: Report


@dataclass(frozen=True)
class Renewal:
    """One job in a heartbeat: renew its lease, and store its latest progress if any."""

    lease: Lease
    progress: Progress | None = None


@dataclass(slots=True)
class Finish:
    """The end of one attempt, as the worker decided it (see `heartq.lifecycle.fate`).
    Read-only by convention, not frozen: one per job (`ClaimedJob` says why)."""

    lease: Lease
    outcome: Outcome
    status: JobStatus  # queued (retry), succeeded, dead or cancelled
    result_json: str | None = None
    error: str | None = None
    retry_delay: float = 0.0
    dead_reason: str | None = None
    crash: dict[str, Any] | None = None
    report: Report | None = None
    """What its task last reported (progress, checkpoint), saved with the finish so a
    finished job shows its last step, and a retry starts from its last checkpoint."""
    waits_for_task: bool = False
    """Released (`Outcome.RELEASED`) because this worker does not know its task, which
    another declared: the job waits `retry_delay` for a worker that knows it
    (`job_waiting_for_task`), where any other release is a shutdown's."""


@dataclass(frozen=True)
class Reclaimed:
    """A job taken back from an attempt that crashed or whose lease expired."""

    job_id: str
    execution_id: int
    worker_id: str | None
    task: str
    status: JobStatus  # queued (will retry), dead or cancelled
    attempts: int
    crash: dict[str, Any]
    retry_delay: float = 0.0
    dead_reason: str | None = None
    queue: str = ""
    outcome: Outcome = Outcome.CRASHED
    """How the attempt ended: `CRASHED`, `INTERRUPTED` (its worker lost the database), or
    `RELEASED` (claimed ahead and never started: no attempt ran)."""
    started_at: float | datetime | None = None
    """When the attempt started, as the backend reads it (seconds or a datetime)."""
    args_json: str | None = None
    meta_json: str | None = None
    """The job's arguments and meta as stored (JSON text), for the crash hooks."""

    @property
    def ref(self) -> AttemptRef:
        """The ended attempt's identity (`AttemptRef`): `attempts` counts it."""
        return AttemptRef(
            self.job_id, self.task, self.queue, self.attempts, self.execution_id, self.worker_id
        )


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
class DeactivatedWorker:
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
class JobCount:
    """How many jobs of a queue are in a status (`Store.job_counts`); of `running` ones,
    how many are claimed ahead: held in a worker's buffer (`--prefetch`), not started."""

    queue: str
    status: str
    count: int
    claimed_ahead: int = 0


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
    blocked: int = 0
    """Blocked jobs cancelled: a dead job held them past the blocked retention."""
