"""The storage interface: every queue operation of the lease protocol, backend-neutral.

Workers, maintenance, the client API and the command line reach the database only
through `Store`, which both backends implement with one shared SQL store (`store/sql/`)
over each dialect's statements (`queries/`); one conformance suite (`tests/conformance`)
runs unchanged against both. Differences show up as capabilities (`Link.supports_notify`,
`liveness_grace`, `Link.holds_liveness_lock`), never as `if backend == ...`.

`Store` is the queue operations, each an explicit method that a worker, an app or an
operator calls: what `open_store` returns and what a caller that needs many of them
takes. What keeps a process connected is not an operation on the queue and lives on an
object of its own, `Store.link` (`Link`, `store/link.py`): reaching the database,
migrating its schema, the pool, the liveness lock a worker holds for its life, the
notifications it listens to, and closing it all. A part of heartq that needs a few
operations takes a role, a narrow protocol of what its callers call, so it says what it
needs and no more:
`Enqueuer` (a schedule's ticks), `LeaseHolder` (a worker's parts that keep and end
attempts, a transport's claims), `Reclaimer` (maintenance), `Registry` (workers as
operators see them), `Inspector` (operators' reads, waiting for an end), `Administrator`
(pruning, vacuum). Times are the database's (`Clock`).

Conventions every implementation keeps:

- All lease arithmetic uses the database's clock. Every time-dependent operation takes an
  optional `now` (seconds since the epoch): `None` means the database's own clock; tests
  pass a value to drive the protocol without sleeping.
- Every write on behalf of a running attempt is fenced on `(job_id, execution_id)` and
  `status = 'running'`. A write that matches no row changes nothing and is reported as lost.
- Batches are one statement per batch (claim, heartbeat, finish, release), whatever
  their size (the heartbeat writes one row, its worker's, whose lease is the attempts').
- Reclaiming (lease expired, stale worker, gone process, restarted name) closes the execution as
  `crashed` with a crash context, and moves the job to `queued` with a backoff or to
  `dead`, in one transaction, so racing reclaimers reclaim each job exactly once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from heartq.queue_controls import QueueControl
from heartq.store.link import Link

if TYPE_CHECKING:  # annotations only: a command that opens no store loads no model
    from heartq.model import (
        CancelResult,
        Claim,
        ClaimedJob,
        DeactivatedWorker,
        DependencyEnd,
        Finish,
        JobCount,
        JobEnd,
        JobPage,
        Lease,
        NewJob,
        PruneCounts,
        PulseReport,
        QueueWait,
        Reclaimed,
        Reconciliation,
        Renewal,
        RenewStatus,
        Report,
        TaskPolicy,
        TickPlan,
        WorkerInfo,
    )


class Clock(Protocol):
    """The database's clock, which every caller judges time by."""

    def clock(self) -> float:
        """The database's current time, in seconds since the epoch."""
        ...


class Enqueuer(Clock, Protocol):
    """A schedule's ticks, once across the fleet: what a worker's scheduler takes
    (`maintenance/scheduler.py`)."""

    def list_schedules(self, last_jobs: bool = True) -> list[dict[str, Any]]:
        """The periodic schedules workers have run or an operator added, by name: `name`,
        `task`, `spec`, `last_tick`, `next_tick` (seconds since the epoch, or None),
        `last_job_id`, `last_job_status`, `updated_at`, `updated_by` (the last tick),
        `definition` (a runtime schedule's, `heartq.runtime_schedules`; None: declared in
        code), `paused`, `changed_at`, `changed_by` (an operator's last change).
        `last_jobs=False`: `last_job_status` None, read without touching the jobs table
        (a worker's scheduler: a lock on that table holds none of its connections)."""
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
        *,
        runtime: bool = False,
        paused: bool = False,
    ) -> list[str]:
        """Enqueue a schedule's due ticks, once across the fleet: with the schedule's row
        locked, `plan(last_tick, now)` says which ticks are due (by the database's clock),
        `make_jobs(ticks)` makes their jobs (each with its tick's unique key), and the row
        moves on, all in one transaction. Returns the ids of the ticks' jobs. A code
        schedule's row is made at its first tick, and its tick drops a runtime definition
        of its name (code wins); a `runtime` schedule's tick does nothing once its row is
        gone or taken by code. Nothing is done either when the row's `paused` is not the
        caller's (changed since it read it: its next pass plans again)."""
        ...


class LeaseHolder(Clock, Protocol):
    """What a worker's parts take to keep and end its attempts (heartbeat, pulse,
    completer, a running attempt, the shutdown's hand-back), and a transport's worker and
    sweeper to claim by id. The claim by queue is the runtime's, which has the `Store`."""

    @property
    def link(self) -> Link:
        """Where a worker's pulse hears its cancels (`Link.listen_cancels`)."""
        ...

    def claim_ids(
        self, worker_id: str, ids: Sequence[str], lease: float, now: float | None = None
    ) -> list[ClaimedJob]:
        """Claim, as `claim` does, those of `ids` that are queued, runnable and have
        neither a concurrency nor a rate key (a transport's messages name them; any other
        id claims nothing)."""
        ...

    def due_for_publish(
        self,
        queues: Sequence[str],
        since: float,
        waiting_since: float,
        limit: int,
        now: float | None = None,
    ) -> tuple[list[tuple[str, str]], float]:
        """`(job id, queue)` of queued, runnable, unkeyed jobs of `queues` that fell due or
        were queued again after `since`, or are runnable since `waiting_since`; and the
        database's time (a transport's sweeper publishes them)."""
        ...

    def heartbeat(self, worker_id: str, renewals: Sequence[Renewal], lease: float,
                  now: float | None = None, *, detach: Sequence[Lease] = (),
                  sweep: bool = False) -> dict[Lease, RenewStatus]:  # fmt: skip
        """Renew its row and lease (`detach`, `sweep`: design/leases.md, "Leases and
        heartbeats")."""
        ...

    def record_abandoned(self, worker_id: str, count: int) -> None:
        """Record in the worker's registry row how many attempts' code it has abandoned
        (their end decided, their code still running and holding its slot): what
        `heartq workers` shows. The worker's pulse calls it when the count changed, so
        the figure is current within about a second without a write per attempt."""
        ...

    def pulse(
        self, reports: Sequence[PulseReport], now: float | None = None
    ) -> dict[Lease, RenewStatus]:
        """Store what running tasks reported (progress, checkpoint) for many attempts in
        one fenced statement, the worker's pulse; leases are not renewed, but each job's
        `heartbeat_at` moves: a report is a sign of life, the last one before a crash is
        where the attempt's duration ends (`heartq.inspect.attempts`). Per lease:
        renewed (stored), cancel requested (stored; stop the task) or lost."""
        ...

    def cancel_requests(self, worker_id: str, leases: Sequence[Lease]) -> list[Lease]:
        """Those of `leases` (attempts `worker_id` holds) still running under it whose
        cancel was requested: one read for the worker's attempts, what its pulse asks
        where no notification says so. Each is looked up by its own key: the read costs
        the same however many jobs the worker ran before (docs/design/leases.md, "The pulse")."""
        ...

    def completing(
        self,
        lease: Lease,
        report: Callable[[], Report | None] | None = None,
        result: Callable[[], str | None] | None = None,
    ) -> contextlib.AbstractContextManager[Any]:
        """A write transaction lent to a task (`ctx.transaction()`): it writes its effects
        on the connection given; when the block ends the job is completed `succeeded` in
        the same transaction, fenced on the lease, with what the task last reported
        (`report()`, asked then) and the result it handed to the commit (`result()`, its
        JSON, asked then; None: none, the result is saved after, `save_result`); if this
        attempt no longer holds the job, everything rolls back and `LeaseLost` is raised.
        What the task reports after the commit is not stored (its job is no longer
        running)."""
        ...

    def save_result(self, lease: Lease, result_json: str | None, lost: str | None = None) -> bool:
        """Store the result of a job its task completed in `completing` without handing it
        one (or, `lost`, why it has none: its code failed after the commit), fenced on the
        lease and the result still pending; waiters (`App.result`) are told. Whether it
        landed."""
        ...

    def finish(self, finishes: Sequence[Finish], now: float | None = None) -> list[Lease]:
        """Record the end of many attempts in one fenced statement, with what each task
        last reported (`Finish.report`); returns the leases lost."""
        ...

    def release(self, leases: Sequence[Lease], now: float | None = None) -> list[Lease]:
        """Give jobs back on shutdown (no attempt counted); returns the leases lost."""
        ...

    def crash_attempt(
        self, lease: Lease, crash: dict[str, Any], detected_by: str, now: float | None = None
    ) -> Reclaimed | None:
        """Close one attempt as crashed at once (a child process died). None if lost."""
        ...

    def dependency_results(self, job_id: str) -> list[DependencyEnd]:
        """What a job that takes its dependencies' results (`ClaimedJob.dependency_results`)
        receives: each dependency whose result it takes, in order, its status, result,
        whether it is passed as it is, whether it is still to come and why it was lost
        (`lost`). One read."""
        ...


class Reclaimer(Protocol):
    """Reclaiming the jobs of holders that are gone: expired leases, silent workers,
    workers whose liveness lock is free, a restarted worker's namesakes (the maintenance
    services, `heartq reclaim`, a worker's startup reconciliation)."""

    @property
    def liveness_grace(self) -> float:
        """Seconds a worker's liveness lock must stay free, on consecutive probes, before
        a probe believes the worker gone (0: the first free reading is believed)."""
        ...

    def reclaim_expired(
        self,
        detected_by: str,
        limit: int = 100,
        now: float | None = None,
        observer: str | None = None,
    ) -> list[Reclaimed]:
        """Reclaim up to `limit` running jobs whose lease has expired, and give up up to
        `limit` results still to come whose committing attempt's lease has expired (the
        job stays succeeded, with no result; a later save is refused).

        With `observer` (the reclaiming worker's id), nothing is reclaimed unless that worker
        has been in unbroken contact with the database for its own `stale_after`: after a
        pause of the database every lease looks expired, and their holders need one
        heartbeat to renew them (docs/design/database-bad-days.md, "A pause is not a death")."""
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

    def mark_stale_workers(
        self,
        stale_after: float,
        detected_by: str,
        now: float | None = None,
        observer: str | None = None,
    ) -> list[DeactivatedWorker]:
        """Mark workers silent for longer than their own recorded `stale_after` (else the
        `stale_after` given here) inactive and reclaim their jobs.

        With `observer` (the judging worker's id), a worker is judged only if the observer
        has been in unbroken contact with the database for at least the judged worker's
        threshold: silence the observer could not have heard is no evidence."""
        ...

    def liveness_probe(
        self, detected_by: str, now: float | None = None, observer: str | None = None
    ) -> list[DeactivatedWorker]:
        """Find active workers whose process is gone (lock free), reclaim their jobs;
        `observer`, the probing worker, is named in their crash context."""
        ...

    def liveness_suspects(self) -> dict[str, float]:
        """Workers this store instance found with a free lock, not yet for the whole
        `liveness_grace`: worker id -> database time it was first found free. A one-shot
        caller (`heartq reclaim`) waits out the grace once and probes again."""
        ...


class Registry(Clock, Protocol):
    """Workers as operators see them, with whose lock is free (`inspect/jobs.py`, the
    demo's fleet)."""

    def list_workers(self, include_all: bool = False) -> list[dict[str, Any]]: ...

    def liveness_free(self, worker_ids: Sequence[str]) -> list[str]:
        """Which of these active workers' liveness locks are free right now: their
        process is gone. Read only: nothing is reclaimed and no grace is waited out
        (operator commands show such a worker as gone until a maintenance pass reclaims it)."""
        ...


class Inspector(Protocol):
    """Reading jobs for an operator (`inspect/`) and waiting for a job's end
    (`App.result`): nothing here changes a job."""

    @property
    def link(self) -> Link:
        """Where a waiter hears that awaited jobs ended (`Link.listen_ends`)."""
        ...

    def list_jobs(
        self, status: str | None = None, queue: str | None = None, limit: int = 100,
        claimed_ahead: bool | None = None,
    ) -> list[dict[str, Any]]:  # fmt: skip
        """The newest jobs matching the filters. `claimed_ahead` (with `status`
        running): only jobs held in a worker's buffer (True) or only started ones (False)."""
        ...

    def browse_jobs(
        self,
        status: str | None = None,
        queue: str | None = None,
        task: str | None = None,
        before: str | None = None,
        limit: int = 50,
        scan: int = 10_000,
        claimed_ahead: bool | None = None,
    ) -> JobPage:
        """Jobs by id, newest first (heartq's ids are time-ordered), those matching the
        filters, from the first id below `before`: a keyset page of the primary key that
        reads at most `scan` jobs, whatever the table holds (the dashboard's job list).
        Ids a caller chose sort by their text. `claimed_ahead` as in `list_jobs`."""
        ...

    def finished_per_minute(
        self, minutes: int = 60, now: float | None = None
    ) -> list[tuple[float, str, int]]:
        """`(minute, status, count)` of the jobs that ended (succeeded, dead, cancelled)
        in the last `minutes` minutes, `minute` being its start (seconds since the epoch):
        a range of the index of finished jobs."""
        ...

    def job_counts(self) -> list[JobCount]:
        """`count_jobs`, with how many of each queue's running jobs are claimed ahead
        (read in the same statement, so the figures agree): what operators are shown."""
        ...

    def concurrency_usage(self) -> list[dict[str, Any]]:
        """Per concurrency key with jobs queued or running: `key`, `running`, `queued`
        and `limit` (the largest limit its jobs carry), busiest first; for `heartq stats`."""
        ...

    def rate_usage(self, now: float | None = None) -> list[dict[str, Any]]:
        """Per rate key and limit with jobs queued or running: `key`, `limit` (`"30/s"`;
        `count` and `period` in seconds), `started` (its attempts started within the
        period, up to now), `next_start_in` (seconds until the next start frees up, when
        `started` is at the limit; else None), `waiting` (queued jobs that are due: what
        the limit holds back when it is reached), `queued`, `running`; most waiting
        first, at most 1000. For `heartq stats` and the dashboard."""
        ...

    def fair_usage(self, counted: int = 10_000) -> list[dict[str, Any]]:
        """Per queue and fairness key with jobs queued or running that take turns (no
        concurrency or rate key: `heartq.store.sql.fair`): `queue`, `key`, `queued`
        (counted up to `counted`), `more` (it may hold more than `queued`), `running`,
        `weight` (its next job's, as a claim reads it; 1.0 if none given); by queue, then
        most running, then most queued. At most 1000 keys are read, and no backlog is
        walked: PostgreSQL counts each key's ready-log lanes up to `counted` (a key's
        jobs that came back or were delayed wait outside the ready log, not counted);
        SQLite reads each queue's lines of turns (one a priority) 10,000 jobs deep
        (`FAIR_LINE_READ`: a key's count is what lies there, `more` when a line goes on).
        For `heartq queues`, the dashboard and the metrics (`heartq.inspect.fairness`)."""
        ...

    def await_end(self, job_id: str) -> JobEnd:
        """Mark the job awaited (its end will be announced to `Link.listen_ends`) and
        return where it stands now. Raises `JobNotFound`."""
        ...

    def job_end(self, job_id: str) -> JobEnd:
        """Where the job stands now (a cheap read; for a blocked job, the dead job that
        holds it). Raises `JobNotFound`."""
        ...


class Administrator(Protocol):
    """The prune of what retention no longer keeps, the jobs table's vacuum (`maintenance/
    pruner.py`; `vacuum_jobs`: True if it vacuumed, unless done within `since` seconds)."""

    def vacuum_jobs(self, since: float = 0.0) -> bool: ...

    def prune(  # the succeeded jobs' ids kept: depended on until success_trace_retention
        self, worker_retention: float, job_retention: float, now: float | None = None,
        *, success_trace_retention: float = ..., blocked_retention: float | None = None,
    ) -> PruneCounts: ...  # fmt: skip


class QueueController(Protocol):
    """Queues an operator controls while workers run (`heartq.queue_controls`): written
    by an operator, read by every worker of a queue once a second."""

    def set_queue_control(
        self,
        queue: str,
        *,
        paused: bool | None,
        scale: bool,
        concurrency: int | None,
        by: str,
        now: float | None = None,
    ) -> QueueControl:
        """Pause or resume `queue` (`paused`; None: as it was) and, if `scale`, cap each
        worker's share of it at `concurrency` (None: no cap). Answers what is now stored."""
        ...

    def queue_controls(self, queues: Sequence[str] | None = None) -> dict[str, QueueControl]:
        """The stored controls of `queues` (of every controlled queue when None), by
        queue; a queue never controlled has none."""
        ...


class ScheduleEditor(Protocol):
    """Periodic schedules an operator adds, changes, pauses and removes while workers run
    (`heartq.runtime_schedules`): written in the schedules' rows the scheduler reads."""

    def save_schedule(
        self,
        name: str,
        task: str,
        spec: str,
        definition: Mapping[str, Any],
        *,
        paused: bool,
        replace: bool,
        by: str,
        now: float | None = None,
    ) -> bool:
        """Store a runtime schedule (True: added; False: an existing runtime one
        replaced, with `replace`). `ConfigError` for the name of a code schedule, or of an
        existing runtime one without `replace`; nothing written then."""
        ...

    def remove_schedule(self, name: str, now: float | None = None) -> bool:
        """Remove a runtime schedule (False: there was none). `ConfigError` for a
        schedule declared in code."""
        ...

    def pause_schedule(self, name: str, paused: bool, by: str, now: float | None = None) -> bool:
        """Pause or resume a schedule, runtime or code (False: no such row)."""
        ...


@runtime_checkable
class Store(
    Enqueuer,
    LeaseHolder,
    Reclaimer,
    Registry,
    Inspector,
    Administrator,
    QueueController,
    ScheduleEditor,
    Protocol,
):
    """Every queue operation of the protocol in docs/design/protocol.md: the roles above, and what
    no caller takes alone, declared here by role; and the link they run over."""

    @property
    def link(self) -> Link:
        """The pool, the sessions, the listeners, the schema and `close`."""
        ...

    # -- putting work in: jobs (`App`), and the declarations of the tasks a worker runs
    def enqueue(
        self, jobs: Sequence[NewJob], now: float | None = None, connection: Any = None
    ) -> list[str]:
        """Insert all jobs in one transaction; returns their ids in order. With
        `connection` (the caller's own, in its open transaction: a `sqlite3.Connection`
        on the queue's file, a `psycopg.Connection`), the jobs are written there and exist
        if and only if the caller commits; wake-ups go out with that commit. A job with
        `depends_on` is stored `waiting` (or queued, or cancelled, at once if its
        dependencies already ended); a dependency not found (stored, in the batch, or
        earlier in the same transaction) is `DependencyNotFound`, nothing stored."""
        ...

    async def enqueue_async(self, jobs: Sequence[NewJob], connection: Any) -> list[str]:
        """`enqueue` into the open transaction of an asyncio connection (a
        `psycopg.AsyncConnection`); `ConfigError` where the backend has none."""
        ...

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

    # -- taking, keeping and ending attempts
    def claim(
        self,
        worker_id: str,
        queues: Sequence[str],
        limit: int | Callable[[], int],
        lease: float,
        now: float | None = None,
        ahead: int = 0,
    ) -> Claim:
        """Take up to `limit` runnable jobs, by priority (highest first) then age: jobs
        without a key, then (slots left) jobs with a concurrency key, then jobs with a
        rate key, never more of a key's attempts running than its concurrency limit nor
        started within its period than its rate limit. The answer is a list of the jobs
        that also says, in `rate_wait`, how many seconds until a runnable job that its
        rate limit held back may start (None: none is).

        `limit` may be a callable (a worker's free slots), read once the claim has the
        database in hand: slots that freed while it waited (SQLite's one write lock, held
        by the worker's last finish) are filled by the same claim, not by one more (a
        worker of short jobs on SQLite claimed half as often; 1.08x to 1.14x the jobs/s).

        `ahead`: once the `limit` slots are filled, also claim up to that many more jobs
        without a key *ahead* (`Claim.ahead`): under the worker's lease like the others,
        but not started. Their start must be recorded (`start_ahead`) before their code
        runs; until then a reclaim gives them back with no attempt counted."""
        ...

    def start_ahead(
        self, leases: Sequence[Lease], lease: float, now: float | None = None
    ) -> list[Lease]:
        """Record the start of jobs claimed ahead, in one fenced statement, before their
        code runs: from then on their attempt counts if the worker dies. Returns the
        leases started; one not returned must not run (lost to a reclaim, or its cancel
        was requested: the worker releases it, which ends it cancelled)."""
        ...

    def save_checkpoint(
        self, lease: Lease, checkpoint_json: str, now: float | None = None
    ) -> RenewStatus:
        """Store one checkpoint for the next attempt at once, fenced; `LeaseLost` when
        fenced out. Like a pulse, it is a sign of life: the job's `heartbeat_at` moves.
        (A worker does not call it: its pulse stores what its tasks report in one
        statement for all of them, `pulse`.)"""
        ...

    # -- reclaiming
    def reclaim_worker(
        self, worker_id: str, detected_by: str, reason: str, now: float | None = None
    ) -> list[Reclaimed]:
        """Reclaim every job a (dead) worker holds, and mark the worker inactive."""
        ...

    # -- workers' presence: a worker's row from its start to its stop (its liveness lock
    # is the link's: `Link.liveness_hold`)
    def register_worker(self, info: WorkerInfo, now: float | None = None) -> None: ...

    def stop_worker(self, worker_id: str, now: float | None = None) -> None: ...

    # -- reading the queue (the command line, the dashboard, a burst worker's last look)
    def get_job(self, job_id: str) -> dict[str, Any]:
        """The job with its executions, oldest first, and the policy in force with where
        each part of it comes from. Raises `JobNotFound`."""
        ...

    def resolve_job_id(self, ref: str) -> str:
        """The full id of the job `ref` names: its id in any case, or at least 8 of its
        characters (dashes aside, with or without them) that end or start exactly one
        job's id; `JobNotFound`, or `AmbiguousJobId` (a few matches, with their task and
        status) when several jobs match, either way. The one resolver of every command
        and page that takes a job id."""
        ...

    def count_jobs(self) -> list[tuple[str, str, int]]:
        """`(queue, status, count)` for every non-empty pair."""
        ...

    def has_pending(
        self, queues: Sequence[str], now: float | None = None, retries: bool = True
    ) -> bool:
        """Whether a job of these queues is running (on any worker), runnable, or waiting
        out a retry's backoff: what `heartq worker --burst` waits for before it exits. A
        first attempt delayed into the future (`delay`, `eta`) is not waited for; with
        `retries=False`, nor is a retry (`heartq.testing.drain` leaves those queued). One
        statement: one snapshot of the queue, judged (without `now`) at a time read after
        that snapshot, so a job it sees made runnable is due in it."""
        ...

    def queue_waits(self, now: float | None = None) -> dict[str, QueueWait]:
        """Per queue: how long its oldest runnable job has waited, and how many wait for
        a later `run_at` (delays, retry backoffs). Cheap: it reads the claim index."""
        ...

    # -- an operator's writes (cancel, replay, purge; a test's: retries due, a later attempt)
    def cancel_job(
        self, job_id: str, now: float | None = None, by: str | None = None
    ) -> CancelResult:
        """Cancel a queued, waiting or blocked job at once (its dependents are settled
        from it in the same transaction), or request a running job's cancel; `by` (who
        asked) is kept with the job as `cancelled_by`."""
        ...

    def replay_dead(
        self, job_ids: Sequence[str] | None = None, now: float | None = None
    ) -> list[str]:
        """Replay dead jobs (all when `job_ids` is None), keeping their history; the jobs
        they blocked wait again."""
        ...

    def retry_now(self, queues: Sequence[str], now: float | None = None) -> list[str]:
        """Make the jobs of these queues that wait out a retry's backoff (queued with an
        attempt counted, as `has_pending` counts them) due now, and wake their workers;
        only their `run_at` moves (attempts, retry count and backoff stay). Answers their
        ids. What `heartq.testing.drain(run_retries_now=True)` runs retries with."""
        ...

    def start_at_attempt(self, job_id: str, attempt: int, now: float | None = None) -> bool:
        """A queued job never claimed counts `attempt - 1` attempts (and executions) as
        made: its next claim is attempt `attempt`, judged as such (`heartq.testing.
        run_attempt`). False, nothing changed, for any other job."""
        ...

    def purge_dead(self, older_than: float | None = None, now: float | None = None) -> int: ...

    def purge_dead_ids(
        self, older_than: float | None = None, now: float | None = None, dry_run: bool = False
    ) -> list[str]:
        """`purge_dead`, answering the ids; `dry_run`: those it would purge, kept."""
        ...
