"""`SqlStore`: the one `Store` over SQL, a facade over the roles, each holding one dialect.

Why a facade and not a class built of mixins: each role (`enqueue.py`, `leases.py`,
`reclaim.py`, `registry.py`, `inspection.py`, `admin.py`) is a plain class that takes
the dialect and reads top to bottom; this is the one place that builds them and says
which role answers which call of `Store`. A database is a `Dialect` (its
transactions, clock and statements), a `Liveness` (its liveness locks) and, where it has
notifications, `Listeners`, made by its package (`PostgresStore`, `SQLiteStore`), which
overrides nothing here.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from heartq.model import Lease, LivenessChange
from heartq.store.interface import LivenessHandle
from heartq.store.sql.admin import AdminOps
from heartq.store.sql.base import (
    Dialect,
    Listeners,
    Liveness,
    current_time,
    migration_scripts,
)
from heartq.store.sql.enqueue import EnqueueOps
from heartq.store.sql.inspection import InspectOps
from heartq.store.sql.leases import LeaseOps
from heartq.store.sql.reclaim import ReclaimOps
from heartq.store.sql.registry import RegistryOps

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


class RoleMethod(Generic[R, P, T]):
    """A `Store` operation of `SqlStore`, answered by the method of the same name of the
    role held at `role`: `claim = RoleMethod("leases", LeaseOps.claim)` is the store's
    `claim`, typed as `LeaseOps.claim` is. A method of the class, not only of each store,
    so that `SqlStore.claim(store, ...)` works as for any method."""

    def __init__(self, role: str, method: Callable[Concatenate[R, P], T]) -> None:
        self.role = role
        self.name = method.__name__
        self.__doc__ = method.__doc__

    @overload
    def __get__(self, store: None, owner: type[Any]) -> Callable[Concatenate[Any, P], T]: ...

    @overload
    def __get__(self, store: object, owner: type[Any]) -> Callable[P, T]: ...

    def __get__(self, store: object | None, owner: type[Any]) -> Callable[..., T]:
        if store is None:
            return functools.partial(_call, self.role, self.name)
        answer: Callable[..., T] = getattr(getattr(store, self.role), self.name)
        return answer


def _call(role: str, name: str, store: Any, *args: Any, **kwargs: Any) -> Any:
    """`RoleMethod` read from the class: the role's method called for `store`."""
    return getattr(getattr(store, role), name)(*args, **kwargs)


class SqlStore:
    """`Store` over one dialect: each operation answered by its role (the `RoleMethod`s
    below, grouped by role), the lifecycle by the dialect, liveness locks and
    notifications by the backend's own objects."""

    # -- putting work in
    enqueue = RoleMethod("enqueuing", EnqueueOps.enqueue)
    enqueue_async = RoleMethod("enqueuing", EnqueueOps.enqueue_async)
    list_schedules = RoleMethod("enqueuing", EnqueueOps.list_schedules)
    tick_schedule = RoleMethod("enqueuing", EnqueueOps.tick_schedule)

    task_policies = RoleMethod("enqueuing", EnqueueOps.task_policies)
    declare_tasks = RoleMethod("enqueuing", EnqueueOps.declare_tasks)
    reroute_jobs = RoleMethod("enqueuing", EnqueueOps.reroute_jobs)

    # -- taking, keeping and ending leases
    claim = RoleMethod("leases", LeaseOps.claim)
    start_ahead = RoleMethod("leases", LeaseOps.start_ahead)
    claim_ids = RoleMethod("leases", LeaseOps.claim_ids)
    due_for_publish = RoleMethod("leases", LeaseOps.due_for_publish)
    heartbeat = RoleMethod("leases", LeaseOps.heartbeat)
    record_abandoned = RoleMethod("leases", LeaseOps.record_abandoned)
    pulse = RoleMethod("leases", LeaseOps.pulse)
    cancel_requests = RoleMethod("leases", LeaseOps.cancel_requests)
    save_checkpoint = RoleMethod("leases", LeaseOps.save_checkpoint)
    completing = RoleMethod("leases", LeaseOps.completing)
    save_result = RoleMethod("leases", LeaseOps.save_result)
    finish = RoleMethod("leases", LeaseOps.finish)
    release = RoleMethod("leases", LeaseOps.release)

    # -- reclaiming
    reap_expired = RoleMethod("reclaiming", ReclaimOps.reap_expired)
    reclaim_worker = RoleMethod("reclaiming", ReclaimOps.reclaim_worker)
    reclaim_by_name = RoleMethod("reclaiming", ReclaimOps.reclaim_by_name)
    crash_attempt = RoleMethod("reclaiming", ReclaimOps.crash_attempt)  # a holder's, as a reclaim
    mark_stale_workers = RoleMethod("reclaiming", ReclaimOps.mark_stale_workers)
    liveness_probe = RoleMethod("reclaiming", ReclaimOps.liveness_probe)

    # -- the registry
    register_worker = RoleMethod("registry", RegistryOps.register_worker)
    stop_worker = RoleMethod("registry", RegistryOps.stop_worker)
    list_workers = RoleMethod("registry", RegistryOps.list_workers)

    # -- reading
    get_job = RoleMethod("inspection", InspectOps.get_job)
    resolve_job_id = RoleMethod("inspection", InspectOps.resolve_job_id)
    dependency_results = RoleMethod("inspection", InspectOps.dependency_results)
    await_end = RoleMethod("inspection", InspectOps.await_end)
    job_end = RoleMethod("inspection", InspectOps.job_end)
    list_jobs = RoleMethod("inspection", InspectOps.list_jobs)
    browse_jobs = RoleMethod("inspection", InspectOps.browse_jobs)
    finished_per_minute = RoleMethod("inspection", InspectOps.finished_per_minute)
    count_jobs = RoleMethod("inspection", InspectOps.count_jobs)
    job_counts = RoleMethod("inspection", InspectOps.job_counts)
    has_pending = RoleMethod("inspection", InspectOps.has_pending)
    concurrency_usage = RoleMethod("inspection", InspectOps.concurrency_usage)
    rate_usage = RoleMethod("inspection", InspectOps.rate_usage)
    queue_waits = RoleMethod("inspection", InspectOps.queue_waits)

    # -- an operator's writes
    cancel_job = RoleMethod("admin", AdminOps.cancel_job)
    replay_dead = RoleMethod("admin", AdminOps.replay_dead)
    retry_now = RoleMethod("admin", AdminOps.retry_now)
    start_at_attempt = RoleMethod("admin", AdminOps.start_at_attempt)
    purge_dead = RoleMethod("admin", AdminOps.purge_dead)
    purge_dead_ids = RoleMethod("admin", AdminOps.purge_dead_ids)
    prune = RoleMethod("admin", AdminOps.prune)
    vacuum_jobs = RoleMethod("admin", AdminOps.vacuum_jobs)

    def __init__(
        self,
        dialect: Dialect,
        liveness: Liveness,
        listeners: Listeners | None,
        *,
        holds_liveness_lock: bool = True,
    ) -> None:
        self.dialect = dialect
        self.liveness = liveness
        self.listeners = listeners
        self.q = dialect.q
        self.url = dialect.url
        self.supports_notify = listeners is not None
        self.holds_liveness_lock = holds_liveness_lock
        """Whether this store's workers hold a liveness lock (recorded with each worker:
        False behind a transaction-mode pooler without a direct URL, whose workers have
        no session to hold one and are judged by heartbeats and leases alone)."""

        self.enqueuing = EnqueueOps(dialect)
        self.leases = LeaseOps(dialect)
        self.reclaiming = ReclaimOps(dialect, liveness)
        self.registry = RegistryOps(dialect, holds_liveness_lock)
        self.inspection = InspectOps(dialect, self.enqueuing)
        self.admin = AdminOps(dialect)
        # Each operation bound once to its role's method: a call goes straight to the role
        # (the `RoleMethod`s give the class its methods, their types and documentation).
        for name, answered in vars(SqlStore).items():
            if isinstance(answered, RoleMethod):
                setattr(self, name, answered.__get__(self, type(self)))

    # -- lifecycle -----------------------------------------------------------------------
    def migrations(self) -> list[tuple[int, str]]:
        """This dialect's schema migrations, oldest first: `(version, script)` (what its
        dialect's `migrate` runs: a test steers it by replacing this method)."""
        return migration_scripts(type(self).__module__.rsplit(".", 1)[0])

    def migrate(self) -> int:
        return self.dialect.migrate()

    def ensure_schema(self) -> None:
        self.dialect.ensure_schema()

    def reach(self) -> None:
        self.dialect.reach()

    def resize_pool(self, size: int) -> None:
        self.dialect.resize_pool(size)

    def close(self) -> None:
        self.dialect.close()

    def clock(self) -> float:
        return current_time(self.dialect)

    def deployment_id(self) -> str:
        self.dialect.ensure_schema()
        with self.dialect.read() as conn:
            row = conn.execute(self.q.DEPLOYMENT_ID).fetchone()
        return str(row["id"])

    # -- liveness locks and notifications: the dialect package's own objects -------------
    @property
    def liveness_grace(self) -> float:
        """Seconds a worker's liveness lock must stay free before a probe believes it
        dead (0: a free lock is a dead process)."""
        return self.liveness.grace

    @liveness_grace.setter
    def liveness_grace(self, seconds: float) -> None:
        self.liveness.grace = seconds

    def liveness_hold(
        self, worker_id: str, on_change: Callable[[LivenessChange], None] | None = None
    ) -> LivenessHandle:
        return self.liveness.hold(worker_id, on_change)

    def liveness_suspects(self) -> dict[str, float]:
        return self.liveness.suspects()

    def liveness_free(self, worker_ids: Sequence[str]) -> list[str]:
        return self.liveness.free(worker_ids)

    def listen(
        self, on_wake: Callable[[], None], on_due: Callable[[float], None] | None = None
    ) -> LivenessHandle | None:
        return None if self.listeners is None else self.listeners.listen(on_wake, on_due)

    def listen_ends(self, on_end: Callable[[str | None], None]) -> LivenessHandle | None:
        return None if self.listeners is None else self.listeners.listen_ends(on_end)

    def listen_cancels(
        self, worker_id: str, on_cancel: Callable[[], None]
    ) -> LivenessHandle | None:
        if self.listeners is None:
            return None
        return self.listeners.listen_cancels(worker_id, on_cancel)

    # -- for the tests that write rows directly ------------------------------------------
    def _write(self) -> contextlib.AbstractContextManager[Any]:
        return self.dialect.write()

    def _apply_finishes(
        self, conn: Any, docs: list[dict[str, Any]], clock: float | None
    ) -> set[Lease]:
        return self.leases.ends.apply_finishes(conn, docs, clock)
