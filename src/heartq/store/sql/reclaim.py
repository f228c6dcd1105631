"""Reclaiming the jobs of attempts whose holder is gone: expired leases, workers gone
silent, workers whose liveness lock is free (each dialect's `Liveness.probe` finds them
and calls `reclaim_dead`), earlier workers of a restarted worker's name, and one attempt
its own worker saw crash.

Why together: they all end in `_reclaim`: the rows are planned by `heartq.store.reclaim`
(crash context and fate), closed with the fenced finish and their queues woken, in the
caller's write transaction, so racing reclaimers reclaim each job exactly once. They
judge silence the same way too (`_contact`: only what the observer could have heard is
evidence). `mark_stale_workers` deactivates workers in the registry, but to reclaim
their jobs, so it lives here and not in `registry.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from heartq.lifecycle import crash
from heartq.model import Lease, Reclaimed, Reconciliation, StaleWorker
from heartq.store import reclaim as reclaim_plan
from heartq.store import records
from heartq.store.sql.base import Dialect, Liveness, database_time, run, wake
from heartq.store.sql.leases import JobEnds

ALWAYS_IN_CONTACT = 1e18
"""The contact of a caller that is not a worker: it judges as if it had always seen the
database (seconds; a finite number every dialect binds as a float)."""


class ReclaimOps:
    """The reclaimer's operations of `SqlStore` (`Reclaimer` in `store/interface.py`), but
    the liveness probe, which the dialect's `Liveness` drives (calling `reclaim_dead`)."""

    def __init__(self, dialect: Dialect, locks: Liveness) -> None:
        self.d = dialect
        self.q = dialect.q
        self.ends = JobEnds(dialect)
        self.locks = locks  # how a namesake's liveness lock is judged (`reclaim_by_name`)

    def _reclaim(
        self,
        conn: Any,
        clock: float | None,
        rows: Sequence[Any],
        detected_by: str,
        reason: str,
        extra: dict[str, Any] | None = None,
    ) -> list[Reclaimed]:
        """Close each row's execution as crashed and requeue or bury its job, inside the
        caller's write transaction, fenced: exactly once whoever races."""
        if not rows:
            return []
        t = database_time(self.d, conn, clock)
        docs, decided = reclaim_plan.plan(rows, t, detected_by, reason, extra)
        landed = self.ends.apply_finishes(conn, docs, clock)
        requeued = {row["queue"] for row, doc in zip(rows, docs, strict=True) if doc["keep"]}
        wake(self.d, conn, requeued)  # runnable now: idle workers need not wait for a poll
        return [r for r in decided if Lease(r.job_id, r.execution_id) in landed]

    def reap_expired(
        self,
        detected_by: str,
        limit: int = 100,
        now: float | None = None,
        observer: str | None = None,
    ) -> list[Reclaimed]:
        self.d.ensure_schema()
        with self.d.write() as conn:
            clock = self.d.clock(conn, now)
            contact, own_threshold = self._contact(conn, clock, observer)
            if contact < own_threshold:
                return []
            rows = conn.execute(self.q.SELECT_EXPIRED, {"now": clock, "limit": limit}).fetchall()
            given_up = run(conn, self.q.GIVE_UP_RESULTS, {"now": clock, "limit": limit})
            self.d.announce_ended(conn, records.awaited_ends(given_up))
            return self._reclaim(
                conn, clock, rows, detected_by, "lease expired", crash.detector(observer)
            )

    def reclaim_worker(
        self, worker_id: str, detected_by: str, reason: str, now: float | None = None
    ) -> list[Reclaimed]:
        with self.d.write() as conn:
            clock = self.d.clock(conn, now)
            conn.execute(self.q.DEACTIVATE_WORKER, {"worker_id": worker_id, "now": clock})
            rows = conn.execute(self.q.SELECT_WORKER_JOBS, {"worker_id": worker_id}).fetchall()
            return self._reclaim(conn, clock, rows, detected_by, reason)

    def reclaim_by_name(
        self,
        name: str,
        except_worker_id: str,
        detected_by: str,
        now: float | None = None,
        stale_after: float | None = None,
    ) -> Reconciliation:
        self.d.ensure_schema()
        with self.d.write() as conn:
            clock = self.d.clock(conn, now)
            contact, _ = self._contact(conn, clock, except_worker_id)  # judges silence
            params = {
                "name": name,
                "except_id": except_worker_id,
                "now": clock,
                "stale_after": stale_after,
                "contact": contact,
            }
            gone, alive, suspected = reclaim_plan.sort_namesakes(
                run(conn, self.q.NAMESAKES, params), self.locks.lock_free
            )
            self.locks.note_locks(conn, clock, suspected, [n.id for n in alive])
            if not gone:
                return Reconciliation([], alive, suspected)
            ids = self.d.array(gone)
            rows = conn.execute(self.q.SELECT_NAME_JOBS, {"ids": ids}).fetchall()
            conn.execute(self.q.DEACTIVATE_NAMED, {"ids": ids, "now": clock})
            reason = f"worker restarted under the same name {name!r}"
            reclaimed = self._reclaim(conn, clock, rows, detected_by, reason)
        self.locks.forget(gone)
        return Reconciliation(reclaimed, alive, suspected)

    def crash_attempt(
        self, lease: Lease, crash: dict[str, Any], detected_by: str, now: float | None = None
    ) -> Reclaimed | None:
        params = {
            "job_id": lease.job_id,
            "execution_id": lease.execution_id,
            "worker_id": lease.worker_id,  # its own worker's report: fenced as its writes
        }
        reason = str(crash.get("reason", "crashed"))
        extra = {k: v for k, v in crash.items() if k != "reason"}
        with self.d.write() as conn:
            clock = self.d.clock(conn, now)
            rows = conn.execute(self.q.SELECT_ONE_RUNNING, params).fetchall()
            done = self._reclaim(conn, clock, rows, detected_by, reason, extra)
        return done[0] if done else None

    def mark_stale_workers(
        self,
        stale_after: float,
        detected_by: str,
        now: float | None = None,
        observer: str | None = None,
    ) -> list[StaleWorker]:
        self.d.ensure_schema()
        with self.d.write() as conn:
            clock = self.d.clock(conn, now)
            contact, _ = self._contact(conn, clock, observer)
            params = {"now": clock, "stale_after": stale_after, "contact": contact}
            stale = conn.execute(self.q.DEACTIVATE_STALE, params).fetchall()
            return [
                self._reclaim_stale(conn, clock, row, detected_by, observer) for row in stale
            ]

    def _contact(self, conn: Any, clock: float | None, observer: str | None) -> tuple[float, float]:
        """How long `observer` has been in unbroken contact with the database, and its own
        staleness threshold. No observer (an operator's `heartq reap`), or one not
        registered: judged as always in contact."""
        row = None
        if observer is not None:
            params = {"now": clock, "worker_id": observer}
            row = conn.execute(self.q.OBSERVER_CONTACT, params).fetchone()
        if row is None or row["stale_after"] is None:
            return ALWAYS_IN_CONTACT, 0.0
        return float(row["contact"]), float(row["stale_after"])

    def reclaim_dead(
        self,
        conn: Any,
        clock: float | None,
        worker_ids: Sequence[str],
        detected_by: str,
        observer: str | None = None,
    ) -> list[StaleWorker]:
        """Deactivate each worker found dead and reclaim its jobs; one another prober
        deactivated first is left to it."""
        found = []
        for worker_id in worker_ids:
            params = {"worker_id": worker_id, "now": clock}
            worker = conn.execute(self.q.DEACTIVATE_WORKER, params).fetchone()
            if worker is not None:
                found.append(self._reclaim_stale(conn, clock, worker, detected_by, observer))
        return found

    def _reclaim_stale(
        self,
        conn: Any,
        clock: float | None,
        worker: Any,
        detected_by: str,
        observer: str | None = None,
    ) -> StaleWorker:
        rows = conn.execute(self.q.SELECT_WORKER_JOBS, {"worker_id": worker["id"]}).fetchall()
        reason = records.stale_reason(detected_by, float(worker["heartbeat_age"]))
        extra = crash.detector(observer)
        reclaimed = self._reclaim(conn, clock, rows, detected_by, reason, extra)
        return records.stale_worker(worker, reclaimed)
