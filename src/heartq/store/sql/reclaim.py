"""Reclaiming the jobs of attempts whose holder is gone: expired leases, workers gone
silent, workers whose liveness lock is free (each dialect's `Liveness.gone` finds them,
in the transaction `liveness_probe` reclaims them in), earlier workers of a restarted
worker's name, and one attempt its own worker saw crash.

Why together: they all end in `_reclaim`: the rows are planned (`plan`: crash context and
fate), closed with the fenced finish and their queues woken, in the caller's write
transaction, so racing reclaimers reclaim each job exactly once. They judge silence the
same way too (`_contact`: only what the observer could have heard is evidence).
`mark_stale_workers` deactivates workers in the registry, but to reclaim their jobs, so it
lives here and not in `registry.py`.

Planning a reclaim (`plan`, below the operations) is the store's side of a crashed
attempt: the statements select the running rows to reclaim with the columns of
`RECLAIM_COLUMNS`, `plan()` turns them into finish documents, and the fenced finish
statement applies them in the same transaction. What the crash context holds and what
becomes of each job is `heartq.lifecycle.crash`; `plan` turns rows into its questions and
its answers into documents. `sort_namesakes` decides which namesakes a restarted worker
may reclaim from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from heartq import lost_results
from heartq.lifecycle import crash
from heartq.lifecycle.crash import HeldJob, after, crash_context, ended_by
from heartq.lifecycle.fate import attempts_after, released_status
from heartq.model import (
    DeactivatedWorker,
    JobStatus,
    Lease,
    LiveNamesake,
    Outcome,
    Reclaimed,
    Reconciliation,
)
from heartq.store import records
from heartq.store.documents import finish_doc
from heartq.store.sql.base import Dialect, Liveness, database_time, run, wake
from heartq.store.sql.leases import JobEnds

ALWAYS_IN_CONTACT = 1e18
"""The contact of a caller that is not a worker: it judges as if it had always seen the
database (seconds; a finite number every dialect binds as a float)."""


class ReclaimOps:
    """The reclaimer's operations of `SqlStore` (`Reclaimer` in `store/interface.py`)."""

    def __init__(self, dialect: Dialect, locks: Liveness) -> None:
        self.d = dialect
        self.q = dialect.q
        self.ends = JobEnds(dialect)
        self.locks = locks  # who is gone by the liveness locks, how a namesake's is judged

    def _reclaim(
        self,
        conn: Any,
        clock: float | None,
        rows: Sequence[Any],
        detected_by: str,
        reason: str,
        extra: dict[str, Any] | None = None,
    ) -> list[Reclaimed]:
        """Close each row's execution as crashed and queue again or bury its job, inside the
        caller's write transaction, fenced: exactly once whoever races."""
        if not rows:
            return []
        t = database_time(self.d, conn, clock)
        docs, decided = plan(rows, t, detected_by, reason, extra)
        landed = self.ends.apply_finishes(conn, docs, clock)
        queued = {row["queue"] for row, doc in zip(rows, docs, strict=True) if doc["keep"]}
        wake(self.d, conn, queued)  # runnable now: idle workers need not wait for a poll
        return [r for r in decided if Lease(r.job_id, r.execution_id) in landed]

    def reclaim_expired(
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
            walked, rows = self._lapsed(conn, clock, limit)
            lost = {"now": clock, "limit": limit, "reason": lost_results.AFTER_COMMIT}
            given_up = run(conn, self.q.GIVE_UP_RESULTS, lost)
            self.d.announce_ended(conn, records.awaited_ends(given_up))
            reclaimed = self._reclaim(
                conn, clock, rows, detected_by, "lease expired", crash.detector(observer)
            )
            for worker_id in walked:  # walked once: cleared if nothing of it runs attached
                run(conn, self.q.CLEAR_WORKER_LEASE, {"worker_id": worker_id, "now": clock})
            return reclaimed

    def _lapsed(self, conn: Any, clock: float | None, limit: int) -> tuple[list[str], list[Any]]:
        """The attempts whose effective lease ran out (docs/design/leases.md, "Leases and
        heartbeats"), up to `limit`: those left attached to a worker past its lease (the
        workers walked, locked first), then those detached past their own deadline."""
        params: dict[str, Any] = {"now": clock, "limit": limit}
        walked = [str(r["id"]) for r in run(conn, self.q.EXPIRED_WORKERS, params)]
        rows: list[Any] = []
        for worker_id in walked:
            left = dict(params, worker_id=worker_id, limit=limit - len(rows))
            if left["limit"] > 0:
                rows += run(conn, self.q.SELECT_LAPSED, left)
        if len(rows) < limit:
            rows += run(conn, self.q.SELECT_DETACHED, dict(params, limit=limit - len(rows)))
        return walked, rows

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
            gone, alive, suspected = sort_namesakes(
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
    ) -> list[DeactivatedWorker]:
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
        staleness threshold. No observer (an operator's `heartq reclaim`), or one not
        registered: judged as always in contact."""
        row = None
        if observer is not None:
            params = {"now": clock, "worker_id": observer}
            row = conn.execute(self.q.OBSERVER_CONTACT, params).fetchone()
        if row is None or row["stale_after"] is None:
            return ALWAYS_IN_CONTACT, 0.0
        return float(row["contact"]), float(row["stale_after"])

    def liveness_probe(
        self, detected_by: str, now: float | None = None, observer: str | None = None
    ) -> list[DeactivatedWorker]:
        """Reclaim the jobs of active workers whose liveness lock is free (for the
        dialect's grace), in the write transaction the dialect found them in, then let it
        clean up after them."""
        with self.locks.gone(now) as found:
            if found is None:
                return []
            gone = self._reclaim_gone(
                found.conn, found.clock, found.worker_ids, detected_by, observer
            )
        self.locks.forget(found.worker_ids)
        return gone

    def _reclaim_gone(
        self,
        conn: Any,
        clock: float | None,
        worker_ids: Sequence[str],
        detected_by: str,
        observer: str | None = None,
    ) -> list[DeactivatedWorker]:
        """Deactivate each worker found gone and reclaim its jobs; one another prober
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
    ) -> DeactivatedWorker:
        rows = conn.execute(self.q.SELECT_WORKER_JOBS, {"worker_id": worker["id"]}).fetchall()
        reason = records.stale_reason(detected_by, float(worker["heartbeat_age"]))
        extra = crash.detector(observer)
        reclaimed = self._reclaim(conn, clock, rows, detected_by, reason, extra)
        return records.deactivated_worker(worker, reclaimed)


RECLAIM_COLUMNS = (
    "id",
    "execution_id",
    "worker_id",
    "task",
    "attempts",
    "max_retries",
    "retry_backoff",
    "retry_backoff_max",
    "lease_expires_at",
    "heartbeat_at",
    "worker_heartbeat_at",
    "crashes",
    "interruptions",
    "cancel_requested",
    "claimed_ahead",
    "started_at",
    "args",
    "meta",
)


def plan(
    rows: Sequence[Any],
    now: float | datetime,
    detected_by: str,
    reason: str,
    extra: Mapping[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], list[Reclaimed]]:
    """Finish documents (for the backend's fenced finish statement) and what they mean.

    `rows` are mappings (or `sqlite3.Row`s) with the columns of `RECLAIM_COLUMNS`."""
    outcome = ended_by(detected_by)
    docs: list[dict[str, Any]] = []
    decided: list[Reclaimed] = []
    for row in rows:
        if row["claimed_ahead"]:
            given_back = _unstarted(row, now, detected_by, reason, extra)
            decided.append(given_back)
            docs.append(_unstarted_doc(given_back))
            continue
        r = _decide(row, outcome, now, detected_by, reason, extra)
        decided.append(r)
        docs.append(
            finish_doc(
                r.job_id,
                r.execution_id,
                status=str(r.status),
                outcome=outcome.value,
                error=f"{reason} (detected by {detected_by})",
                delay=r.retry_delay,
                dead_reason=r.dead_reason,
                crash=r.crash,
                keep_place=r.status is JobStatus.QUEUED and r.retry_delay == 0.0,
            )
        )
    return docs, decided


def _crash_of(
    row: Any,
    now: float | datetime,
    detected_by: str,
    reason: str,
    extra: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The crash context of a reclaimed row: what its worker and its lease last said."""
    return crash_context(
        worker_id=row["worker_id"],
        worker_heartbeat_at=row["worker_heartbeat_at"],
        job_heartbeat_at=row["heartbeat_at"],
        lease_expires_at=row["lease_expires_at"],
        detected_at=now,
        detected_by=detected_by,
        reason=reason,
        extra=extra,
    )


def _unstarted(
    row: Any,
    now: float | datetime,
    detected_by: str,
    reason: str,
    extra: Mapping[str, Any] | None,
) -> Reclaimed:
    """A job its worker claimed ahead and never started (docs/design/claim.md, "Claim ahead"):
    back in the queue in its place, its attempt not counted and no crash recorded (its
    code never ran, so it cannot be what killed the worker); 'cancelled' if its cancel
    was requested. The crash context is kept for the log only."""
    crash = _crash_of(row, now, detected_by, f"{reason} (claimed ahead, not started)", extra)
    return Reclaimed(
        job_id=row["id"],
        execution_id=row["execution_id"],
        worker_id=row["worker_id"],
        task=row["task"],
        status=released_status(bool(row["cancel_requested"])),
        attempts=attempts_after(int(row["attempts"]), Outcome.RELEASED),
        crash=crash,
        outcome=Outcome.RELEASED,
        **_job_of(row),
    )


def _unstarted_doc(job: Reclaimed) -> dict[str, Any]:
    """The fenced finish of an unstarted job: outcome `released` (the finish statement
    counts no attempt for it, as for a release at shutdown), no crash, its place kept;
    the statement ends it 'cancelled' instead if its cancel was requested."""
    return finish_doc(
        job.job_id,
        job.execution_id,
        status=JobStatus.QUEUED.value,
        outcome=Outcome.RELEASED.value,
        keep_place=True,  # no error: the job keeps that of its last real attempt
    )


def _decide(
    row: Any,
    outcome: Outcome,
    now: float | datetime,
    detected_by: str,
    reason: str,
    extra: Mapping[str, Any] | None,
) -> Reclaimed:
    """One row's crash context and verdict (`heartq.lifecycle`), as a `Reclaimed`."""
    crash = _crash_of(row, now, detected_by, reason, extra)
    held = HeldJob(
        attempts=row["attempts"],
        max_retries=row["max_retries"],
        retry_backoff=row["retry_backoff"],
        retry_backoff_max=row["retry_backoff_max"],
        crashes=row["crashes"],
        interruptions=row["interruptions"],
        cancel_requested=bool(row["cancel_requested"]),
        backoff=records.backoff(row["retry_rules"]),
    )
    verdict = after(held, outcome, crash)
    return Reclaimed(
        job_id=row["id"],
        execution_id=row["execution_id"],
        worker_id=row["worker_id"],
        task=row["task"],
        status=verdict.status,
        attempts=row["attempts"],
        crash=crash,
        retry_delay=verdict.retry_delay,
        dead_reason=verdict.dead_reason,
        outcome=outcome,
        **_job_of(row),
    )


def _job_of(row: Any) -> dict[str, Any]:
    """What a reclaimed row says of its job and attempt beyond the verdict: its queue, its
    attempt's start, and its arguments and meta as stored (for the crash hooks)."""
    return {
        "queue": str(row["queue"]),
        "started_at": row["started_at"],
        "args_json": row["args"],
        "meta_json": row["meta"],
    }


def sort_namesakes(
    rows: Sequence[Any], lock_free: Callable[[Any], bool | None]
) -> tuple[list[str], list[LiveNamesake], list[str]]:
    """Startup reconciliation, shared by every backend: of the other workers of a name
    (rows with `id`, `heartbeat_age` and `silent`, past their staleness threshold), the
    ids of those that are gone (liveness lock free for the store's grace, or silent),
    those alive, and those suspected (`lock_free` says None: free, not yet for the
    grace). A live namesake (two processes given the same `--name`) keeps its jobs."""
    gone: list[str] = []
    alive: list[LiveNamesake] = []
    suspected: list[str] = []
    for row in rows:
        free = lock_free(row)
        if row["silent"] or free:
            gone.append(str(row["id"]))
        elif free is None:
            suspected.append(str(row["id"]))
        else:
            alive.append(LiveNamesake(str(row["id"]), round(float(row["heartbeat_age"]), 3)))
    return gone, alive, suspected
