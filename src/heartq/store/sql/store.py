"""`SqlStore`: the one `Store` over SQL, each operation an explicit method that says which
role answers it.

Why a class of one-line methods over plain role classes: each role (`enqueue.py`,
`leases.py`, `reclaim.py`, `registry.py`, `inspection.py`, `admin.py`) is a plain class
that holds the dialect and reads top to bottom, and this is the one place that builds
them and says, for every call of `Store`, where it goes: `store.claim` is
`SqlStore.claim`, which is `LeaseOps.claim` (`leases.py`), whose keyed half is
`keyed.claim_keyed`. A database is a `Dialect` (its transactions, clock and statements),
a `Liveness` (its liveness locks, as the reclaimer asks them) and a `Link` (its pool,
sessions, notifications, schema and close: `store.link`, made by the backend's package,
`PostgresStore` and `SQLiteStore`, which override nothing here).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from heartq.config import DEFAULT_SUCCESS_TRACE_RETENTION
from heartq.errors import JobNotFound, PayloadError
from heartq.ids import is_job_id
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
from heartq.queue_controls import QueueControl
from heartq.store.link import Link
from heartq.store.sql.admin import AdminOps
from heartq.store.sql.base import Dialect, Liveness, current_time
from heartq.store.sql.controls import ControlOps
from heartq.store.sql.enqueue import EnqueueOps
from heartq.store.sql.inspection import FAIR_COUNTED, InspectOps
from heartq.store.sql.leases import LeaseOps
from heartq.store.sql.reclaim import ReclaimOps
from heartq.store.sql.registry import RegistryOps
from heartq.store.sql.schedules import ScheduleOps


class SqlStore:
    """`Store` over one dialect: each operation answered by its role, the liveness locks'
    answers by the backend's `Liveness`; what is not a queue operation is `link`'s."""

    def __init__(self, dialect: Dialect, liveness: Liveness, link: Link) -> None:
        self.dialect = dialect
        self.liveness = liveness
        self.link = link
        self.enqueuing = EnqueueOps(dialect)
        self.leases = LeaseOps(dialect)
        self.reclaiming = ReclaimOps(dialect, liveness)
        self.registry = RegistryOps(dialect, link.holds_liveness_lock)
        self.inspection = InspectOps(dialect, self.enqueuing)
        self.admin = AdminOps(dialect)
        self.controls = ControlOps(dialect)
        self.schedules = ScheduleOps(dialect)

    def clock(self) -> float:
        return current_time(self.dialect)

    # -- putting work in: `enqueue.py` ---------------------------------------------------
    def enqueue(
        self, jobs: Sequence[NewJob], now: float | None = None, connection: Any = None
    ) -> list[str]:
        return self.enqueuing.enqueue(jobs, now, connection)

    async def enqueue_async(self, jobs: Sequence[NewJob], connection: Any) -> list[str]:
        return await self.enqueuing.enqueue_async(jobs, connection)

    def list_schedules(self, last_jobs: bool = True) -> list[dict[str, Any]]:
        return self.enqueuing.list_schedules(last_jobs)

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
        return self.enqueuing.tick_schedule(
            name, task, spec, plan, make_jobs, by, now, runtime=runtime, paused=paused
        )

    def task_policies(self, names: Sequence[str] | None = None) -> dict[str, TaskPolicy]:
        return self.enqueuing.task_policies(names)

    def declare_tasks(
        self, policies: Sequence[TaskPolicy], worker_id: str, now: float | None = None
    ) -> list[str]:
        return self.enqueuing.declare_tasks(policies, worker_id, now)

    def reroute_jobs(
        self, names: Sequence[str], now: float | None = None, job_ids: Sequence[str] | None = None
    ) -> int:
        return self.enqueuing.reroute_jobs(names, now, _ids_or_all(job_ids))

    # -- taking, keeping and ending leases: `leases.py` ----------------------------------
    def claim(
        self,
        worker_id: str,
        queues: Sequence[str],
        limit: int | Callable[[], int],
        lease: float,
        now: float | None = None,
        ahead: int = 0,
    ) -> Claim:
        return self.leases.claim(worker_id, queues, limit, lease, now, ahead)

    def start_ahead(
        self, leases: Sequence[Lease], lease: float, now: float | None = None
    ) -> list[Lease]:
        return self.leases.start_ahead(leases, lease, now)

    def claim_ids(
        self, worker_id: str, ids: Sequence[str], lease: float, now: float | None = None
    ) -> list[ClaimedJob]:
        return self.leases.claim_ids(worker_id, _job_ids(ids), lease, now)

    def due_for_publish(
        self,
        queues: Sequence[str],
        since: float,
        waiting_since: float,
        limit: int,
        now: float | None = None,
    ) -> tuple[list[tuple[str, str]], float]:
        return self.leases.due_for_publish(queues, since, waiting_since, limit, now)

    def heartbeat(self, worker_id: str, renewals: Sequence[Renewal], lease: float,
                  now: float | None = None, *, detach: Sequence[Lease] = (),
                  sweep: bool = False) -> dict[Lease, RenewStatus]:  # fmt: skip
        return self.leases.heartbeat(worker_id, renewals, lease, now, detach=detach, sweep=sweep)

    def record_abandoned(self, worker_id: str, count: int) -> None:
        self.leases.record_abandoned(worker_id, count)

    def pulse(
        self, reports: Sequence[PulseReport], now: float | None = None
    ) -> dict[Lease, RenewStatus]:
        return self.leases.pulse(reports, now)

    def cancel_requests(self, worker_id: str, leases: Sequence[Lease]) -> list[Lease]:
        return self.leases.cancel_requests(worker_id, leases)

    def save_checkpoint(
        self, lease: Lease, checkpoint_json: str, now: float | None = None
    ) -> RenewStatus:
        return self.leases.save_checkpoint(lease, checkpoint_json, now)

    def completing(
        self,
        lease: Lease,
        report: Callable[[], Report | None] | None = None,
        result: Callable[[], str | None] | None = None,
    ) -> contextlib.AbstractContextManager[Any]:
        return self.leases.completing(lease, report, result)

    def save_result(self, lease: Lease, result_json: str | None, lost: str | None = None) -> bool:
        return self.leases.save_result(lease, result_json, lost)

    def finish(self, finishes: Sequence[Finish], now: float | None = None) -> list[Lease]:
        return self.leases.finish(finishes, now)

    def release(self, leases: Sequence[Lease], now: float | None = None) -> list[Lease]:
        return self.leases.release(leases, now)

    # -- reclaiming: `reclaim.py`, and the backend's liveness locks ----------------------
    def reclaim_expired(
        self,
        detected_by: str,
        limit: int = 100,
        now: float | None = None,
        observer: str | None = None,
    ) -> list[Reclaimed]:
        return self.reclaiming.reclaim_expired(detected_by, limit, now, observer)

    def reclaim_worker(
        self, worker_id: str, detected_by: str, reason: str, now: float | None = None
    ) -> list[Reclaimed]:
        return self.reclaiming.reclaim_worker(worker_id, detected_by, reason, now)

    def reclaim_by_name(
        self,
        name: str,
        except_worker_id: str,
        detected_by: str,
        now: float | None = None,
        stale_after: float | None = None,
    ) -> Reconciliation:
        return self.reclaiming.reclaim_by_name(
            name, except_worker_id, detected_by, now, stale_after
        )

    def crash_attempt(  # a lease holder's (a child process died), a reclaim of one attempt
        self, lease: Lease, crash: dict[str, Any], detected_by: str, now: float | None = None
    ) -> Reclaimed | None:
        return self.reclaiming.crash_attempt(lease, crash, detected_by, now)

    def mark_stale_workers(
        self,
        stale_after: float,
        detected_by: str,
        now: float | None = None,
        observer: str | None = None,
    ) -> list[DeactivatedWorker]:
        return self.reclaiming.mark_stale_workers(stale_after, detected_by, now, observer)

    def liveness_probe(
        self, detected_by: str, now: float | None = None, observer: str | None = None
    ) -> list[DeactivatedWorker]:
        return self.reclaiming.liveness_probe(detected_by, now, observer)

    @property
    def liveness_grace(self) -> float:
        """Seconds a worker's liveness lock must stay free before a probe believes it
        gone (0: a free lock is a gone process)."""
        return self.liveness.grace

    def liveness_suspects(self) -> dict[str, float]:
        return self.liveness.suspects()

    def liveness_free(self, worker_ids: Sequence[str]) -> list[str]:
        return self.liveness.free(worker_ids)

    # -- the registry: `registry.py` -----------------------------------------------------
    def register_worker(self, info: WorkerInfo, now: float | None = None) -> None:
        self.registry.register_worker(info, now)

    def stop_worker(self, worker_id: str, now: float | None = None) -> None:
        self.registry.stop_worker(worker_id, now)

    def list_workers(self, include_all: bool = False) -> list[dict[str, Any]]:
        return self.registry.list_workers(include_all)

    # -- reading: `inspection.py` --------------------------------------------------------
    def get_job(self, job_id: str) -> dict[str, Any]:
        return self.inspection.get_job(_job_id(job_id))

    def resolve_job_id(self, ref: str) -> str:
        return self.inspection.resolve_job_id(ref)

    def dependency_results(self, job_id: str) -> list[DependencyEnd]:
        return self.inspection.dependency_results(_job_id(job_id))

    def await_end(self, job_id: str) -> JobEnd:
        return self.inspection.await_end(_job_id(job_id))

    def job_end(self, job_id: str) -> JobEnd:
        return self.inspection.job_end(_job_id(job_id))

    def list_jobs(
        self, status: str | None = None, queue: str | None = None, limit: int = 100,
        claimed_ahead: bool | None = None,
    ) -> list[dict[str, Any]]:  # fmt: skip
        return self.inspection.list_jobs(status, queue, limit, claimed_ahead)

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
        if before is not None and _as_job_id(before) is None:
            raise PayloadError(f"a page starts before a job id, not {before!r}")
        return self.inspection.browse_jobs(status, queue, task, before, limit, scan, claimed_ahead)

    def finished_per_minute(
        self, minutes: int = 60, now: float | None = None
    ) -> list[tuple[float, str, int]]:
        return self.inspection.finished_per_minute(minutes, now)

    def count_jobs(self) -> list[tuple[str, str, int]]:
        return self.inspection.count_jobs()

    def job_counts(self) -> list[JobCount]:
        return self.inspection.job_counts()

    def has_pending(
        self, queues: Sequence[str], now: float | None = None, retries: bool = True
    ) -> bool:
        return self.inspection.has_pending(queues, now, retries)

    def concurrency_usage(self) -> list[dict[str, Any]]:
        return self.inspection.concurrency_usage()

    def rate_usage(self, now: float | None = None) -> list[dict[str, Any]]:
        return self.inspection.rate_usage(now)

    def fair_usage(self, counted: int = FAIR_COUNTED) -> list[dict[str, Any]]:
        return self.inspection.fair_usage(counted)

    def queue_waits(self, now: float | None = None) -> dict[str, QueueWait]:
        return self.inspection.queue_waits(now)

    # -- an operator's writes, pruning: `admin.py` ---------------------------------------
    def cancel_job(
        self, job_id: str, now: float | None = None, by: str | None = None
    ) -> CancelResult:
        return self.admin.cancel_job(_job_id(job_id), now, by)

    def replay_dead(
        self, job_ids: Sequence[str] | None = None, now: float | None = None
    ) -> list[str]:
        return self.admin.replay_dead(_ids_or_all(job_ids), now)

    def retry_now(self, queues: Sequence[str], now: float | None = None) -> list[str]:
        return self.admin.retry_now(queues, now)

    def start_at_attempt(self, job_id: str, attempt: int, now: float | None = None) -> bool:
        known = _as_job_id(job_id)
        return known is not None and self.admin.start_at_attempt(known, attempt, now)

    def purge_dead(self, older_than: float | None = None, now: float | None = None) -> int:
        return self.admin.purge_dead(older_than, now)

    def purge_dead_ids(
        self, older_than: float | None = None, now: float | None = None, dry_run: bool = False
    ) -> list[str]:
        return self.admin.purge_dead_ids(older_than, now, dry_run)

    def vacuum_jobs(self, since: float = 0.0) -> bool:
        return self.admin.vacuum_jobs(since)

    def prune(
        self,
        worker_retention: float,
        job_retention: float,
        now: float | None = None,
        *,
        success_trace_retention: float = DEFAULT_SUCCESS_TRACE_RETENTION,
        blocked_retention: float | None = None,
    ) -> PruneCounts:
        return self.admin.prune(
            worker_retention,
            job_retention,
            now,
            success_trace_retention=success_trace_retention,
            blocked_retention=blocked_retention,
        )

    # -- queues an operator controls: `controls.py` --------------------------------------
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
        return self.controls.set_queue_control(
            queue, paused=paused, scale=scale, concurrency=concurrency, by=by, now=now
        )

    def queue_controls(self, queues: Sequence[str] | None = None) -> dict[str, QueueControl]:
        return self.controls.queue_controls(queues)

    # -- runtime schedules an operator edits: `schedules.py` -------------------------------
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
        return self.schedules.save_schedule(
            name, task, spec, definition, paused=paused, replace=replace, by=by, now=now
        )

    def remove_schedule(self, name: str, now: float | None = None) -> bool:
        return self.schedules.remove_schedule(name, now)

    def pause_schedule(self, name: str, paused: bool, by: str, now: float | None = None) -> bool:
        return self.schedules.pause_schedule(name, paused, by, now)

    # -- for the tests that write rows directly ------------------------------------------
    def _write(self) -> contextlib.AbstractContextManager[Any]:
        return self.dialect.write()

    def _apply_finishes(
        self, conn: Any, docs: list[dict[str, Any]], clock: float | None
    ) -> set[Lease]:
        return self.leases.ends.apply_finishes(conn, docs, clock)


# A job id from outside (an operator's, a caller's, a transport's message) that is not one
# as heartq makes them (`ids.is_job_id`) names no job: answered here, on both backends,
# without asking the database, which keeps ids as `uuid` on PostgreSQL and would refuse it.


def _as_job_id(job_id: str) -> str | None:
    """`job_id` as text (a `uuid.UUID`, as an application may keep one, is its text), or
    None if it is not a job id."""
    text = str(job_id)
    return text if is_job_id(text) else None


def _job_id(job_id: str) -> str:
    """`_as_job_id`, or `JobNotFound`."""
    known = _as_job_id(job_id)
    if known is None:
        raise JobNotFound(str(job_id))
    return known


def _job_ids(job_ids: Sequence[str]) -> list[str]:
    """The job ids among `job_ids` (`_as_job_id`); the rest name no job."""
    return [known for known in map(_as_job_id, job_ids) if known is not None]


def _ids_or_all(job_ids: Sequence[str] | None) -> list[str] | None:
    """`_job_ids`, where None means every job."""
    return None if job_ids is None else _job_ids(job_ids)
