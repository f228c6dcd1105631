"""An operator's writes: cancelling a job, replaying dead jobs, purging them, making
waiting retries due now (a test's drain) or a job start at a later attempt (a test's
`run_attempt`), and the periodic prune of finished jobs and long-gone workers.

Why together: each is asked for by a person, a test or a retention setting, never by the
protocol of an attempt (a cancel of a running job only requests it: its worker ends
it), and the deletions share `_delete_jobs` (a job's executions and the edges of what it
waited for, then the job). A cancel of a queued, waiting or blocked job settles its
dependents in the same transaction, as every end of a job does (`dependencies.py`); a
replay unblocks the jobs its dead job blocked; a dead job purged, or past the blocked
retention, cancels the jobs it blocked (nothing else would settle them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from heartq.config import DEFAULT_SUCCESS_TRACE_RETENTION
from heartq.errors import JobNotFound
from heartq.ids import first_id_at
from heartq.model import CancelResult, JobStatus, PruneCounts
from heartq.payload import check_text
from heartq.store import records
from heartq.store.sql import dependencies
from heartq.store.sql.base import Dialect, database_time, run, wake
from heartq.store.sql.leases import JobEnds

MAX_DEAD_AGE = 1000 * 365 * 86400.0
"""A purge's "dead for longer than" is cut to 1000 years: no job died earlier, so the
answer is the same, and the database's dates stay in range (PostgreSQL refuses an
interval of 1e300 seconds, or `inf`)."""
PRUNE_BATCH = 10_000

LANE_IDLE = 10.0
"""Seconds a lane of the ready log must have gone without a claim taking from it before
it is pruned (if empty): a lane emptied now and then, between bursts, is kept."""
"""Finished jobs deleted per prune pass, so one pass never holds locks for long."""


class AdminOps:
    """The administrator's operations of `SqlStore` (`Administrator` in
    `store/interface.py`)."""

    def __init__(self, dialect: Dialect) -> None:
        self.d = dialect
        self.q = dialect.q
        self.ends = JobEnds(dialect)

    def cancel_job(
        self, job_id: str, now: float | None = None, by: str | None = None
    ) -> CancelResult:
        self.d.ensure_schema()
        with self.d.write() as conn:
            found = run(conn, self.q.JOB_STATUS, {"job_id": job_id})
            if not found:
                raise JobNotFound(job_id)
            row = found[0]
            who = None if by is None else check_text("by", by)
            clock = self.d.clock(conn, now)
            params = {"job_id": job_id, "now": clock, "by": who}
            if row["status"] in (JobStatus.QUEUED, JobStatus.WAITING, JobStatus.BLOCKED):
                rows = run(conn, self.q.CANCEL_QUEUED, params)
                self.d.announce_ended(conn, records.awaited_ends(rows))
                self.ends.settle_dependents(conn, dependencies.ended_with_dependents(rows), clock)
                return CancelResult.CANCELLED
            if row["status"] == JobStatus.RUNNING:
                holders = conn.execute(self.q.REQUEST_CANCEL, params).fetchall()
                self.d.announce_cancel(conn, [r["worker_id"] for r in holders if r["worker_id"]])
                return CancelResult.CANCEL_REQUESTED
            return CancelResult.ALREADY_FINISHED

    def replay_dead(
        self, job_ids: Sequence[str] | None = None, now: float | None = None
    ) -> list[str]:
        self.d.ensure_schema()
        with self.d.write() as conn:
            clock = self.d.clock(conn, now)
            ids = self.d.array(list(job_ids or []))
            params = {"now": clock, "all": job_ids is None, "ids": ids}
            rows = run(conn, self.q.REPLAY_DEAD, params)
            wake(self.d, conn, {r["queue"] for r in rows})
            holding = [r["id"] for r in rows if r["has_dependents"]]
            if holding:
                self.ends.apply(conn, dependencies.unblock(self.q, holding, self.d.array, clock))
        return [r["id"] for r in rows]

    def retry_now(self, queues: Sequence[str], now: float | None = None) -> list[str]:
        self.d.ensure_schema()
        with self.d.write() as conn:
            params = {"now": self.d.clock(conn, now), "queues": self.d.array(list(queues))}
            rows = run(conn, self.q.RETRY_NOW, params)
            wake(self.d, conn, {r["queue"] for r in rows})
        return [r["id"] for r in rows]

    def start_at_attempt(self, job_id: str, attempt: int, now: float | None = None) -> bool:
        self.d.ensure_schema()
        with self.d.write() as conn:
            params = {"now": self.d.clock(conn, now), "id": job_id, "attempt": attempt}
            return bool(run(conn, self.q.START_AT_ATTEMPT, params))

    def purge_dead(self, older_than: float | None = None, now: float | None = None) -> int:
        return len(self.purge_dead_ids(older_than, now))

    def purge_dead_ids(
        self, older_than: float | None = None, now: float | None = None, dry_run: bool = False
    ) -> list[str]:
        """The ids of the dead jobs purged (all, or those dead for over `older_than`
        seconds); with `dry_run`, those that would be, nothing deleted (what an operator
        is asked to confirm)."""
        self.d.ensure_schema()
        if older_than is not None:
            older_than = min(older_than, MAX_DEAD_AGE)
        with self.d.write() as conn:
            clock = self.d.clock(conn, now)
            params = {"now": clock, "older_than": older_than}
            ids = [r["id"] for r in conn.execute(self.q.SELECT_PURGEABLE_DEAD, params)]
            if not dry_run:
                self._cancel_held(conn, ids, clock, "was purged")
                self._delete_jobs(conn, ids)
        return ids

    def _cancel_held(self, conn: Any, dead: list[str], clock: float | None, why: str) -> int:
        """Cancel the blocked jobs the dead jobs `dead` hold (`dependencies.cancel_held`):
        those jobs will not be replayed, so nothing else would ever settle them. How many
        it cancelled (not counting those cancelled down from them)."""
        if not dead:
            return 0
        program = dependencies.cancel_held(self.q, dead, self.d.array, clock, why)
        return len(self.ends.apply(conn, program).held_cancelled)

    def _delete_jobs(self, conn: Any, ids: list[str]) -> None:
        if ids:
            params = {"ids": self.d.array(ids)}
            conn.execute(self.q.DELETE_EXECUTIONS_OF, params)
            conn.execute(self.q.DELETE_DEPENDENCIES_OF, params)
            conn.execute(self.q.DELETE_JOBS, params)

    # -- pruning -------------------------------------------------------------------------
    def vacuum_jobs(self, since: float = 0.0) -> bool:
        """Give the jobs table's dead row versions back for reuse where the database
        keeps them, unless it was vacuumed within `since` seconds: the dialect's
        (`Dialect.vacuum_jobs`); and, at each call, prune the ready log's lanes that
        emptied (`Dialect.prune_lanes`), so that claims walk only lanes with work."""
        self.d.ensure_schema()
        self.d.prune_lanes(LANE_IDLE)
        return self.d.vacuum_jobs(since)

    def prune(
        self,
        worker_retention: float,
        job_retention: float,
        now: float | None = None,
        *,
        success_trace_retention: float = DEFAULT_SUCCESS_TRACE_RETENTION,
        blocked_retention: float | None = None,
    ) -> PruneCounts:
        """Delete what retention no longer keeps; the ids of the succeeded jobs deleted
        are kept in the trace of pruned successes (a job may still depend on them:
        `dependencies.store`), which forgets those made over `success_trace_retention`
        ago (0: none kept); with `blocked_retention`, the jobs a dead job has blocked
        for longer are cancelled."""
        self.d.ensure_schema()
        self.d.prune_lanes(LANE_IDLE)
        with self.d.write() as conn:
            clock = self.d.clock(conn, now)
            params = {"now": clock, "retention": worker_retention}
            workers = conn.execute(self.q.PRUNE_WORKERS, params).rowcount
            self.d.prune_claim_marks(conn, clock)
            params = {"now": clock, "retention": job_retention, "limit": PRUNE_BATCH}
            ids = [r["id"] for r in conn.execute(self.q.SELECT_PRUNABLE_JOBS, params)]
            if ids and success_trace_retention > 0:
                conn.execute(self.q.RECORD_PRUNED_SUCCESSES, {"ids": self.d.array(ids)})
            self._delete_jobs(conn, ids)
            horizon = database_time(self.d, conn, clock) - success_trace_retention
            forget = {"before": first_id_at(horizon), "limit": PRUNE_BATCH}
            conn.execute(self.q.FORGET_PRUNED_SUCCESSES, forget)
            blocked = 0
            if blocked_retention is not None:
                params = {"now": clock, "retention": blocked_retention, "limit": PRUNE_BATCH}
                holders = [r["id"] for r in conn.execute(self.q.EXPIRED_HOLDERS, params)]
                why = f"was not replayed within {blocked_retention:g} s"
                blocked = self._cancel_held(conn, holders, clock, why)
        return PruneCounts(workers=workers, jobs=len(ids), blocked=blocked)
