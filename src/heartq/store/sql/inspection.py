"""Reading the queue: a job with its history, the job an operator's shortened id names,
lists and pages of jobs, counts, waits, throughput, and where a job stands for a waiter.

Why together: none of these changes a job (`await_end` only marks one awaited, so that
its end is announced), and their callers are the command line, the dashboard, `App`'s
waiters and a burst worker's last look: each is one read over the indexes, never part
of an attempt's protocol. Schedules are listed in `enqueue.py`, with their ticks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from heartq import policy
from heartq.errors import AmbiguousJobId, JobNotFound
from heartq.ids import LEAST_JOB_ID, id_range, is_job_id, typed_forms
from heartq.model import DependencyEnd, JobCount, JobEnd, JobMatch, JobPage, JobStatus, QueueWait
from heartq.store import records
from heartq.store.sql import dependencies
from heartq.store.sql.base import Dialect, run
from heartq.store.sql.enqueue import EnqueueOps

MIN_ID_PREFIX = 8
"""A shortened job id must have at least 8 characters, dashes aside (what `heartq demo`
prints: the last 8)."""
AMBIGUOUS_SHOWN = 5
"""An ambiguous shortened id's error names at most 5 of the jobs it matches."""
FAIR_KEYS_READ = 1000
"""`fair_usage` reads at most 1000 fairness keys with jobs queued (by queue, then key)."""
FAIR_COUNTED = 10_000
"""`fair_usage` counts a key's queued jobs up to 10,000 (`heartq queues` shows 10000+)."""
FAIR_LINE_READ = 10_000
"""SQLite's `fair_usage` reads each tier's line of turns 10,000 jobs deep (its keys and
their counts are those of that part; PostgreSQL counts each key's lane apart)."""


class InspectOps:
    """The inspector's operations of `SqlStore` (`Inspector` in `store/interface.py`)."""

    def __init__(self, dialect: Dialect, enqueuing: EnqueueOps) -> None:
        self.d = dialect
        self.q = dialect.q
        self.enqueuing = enqueuing  # `get_job` shows the policy its task declared

    def get_job(self, job_id: str) -> dict[str, Any]:
        self.d.ensure_schema()
        with self.d.read() as conn:
            row = conn.execute(self.q.GET_JOB, {"job_id": job_id}).fetchone()
            if row is None:
                raise JobNotFound(job_id)
            executions = conn.execute(self.q.GET_EXECUTIONS, {"job_id": job_id}).fetchall()
            declared = self.enqueuing.read_policies(conn, [row["task"]]).get(row["task"])
            depends_on = run(conn, self.q.GET_DEPENDENCIES, {"job_id": job_id})
            params = {"job_id": job_id, "limit": dependencies.DEPENDENTS_SHOWN}
            dependents = (
                run(conn, self.q.GET_DEPENDENTS, params) if row["has_dependents"] else []
            )
            blocked = row["status"] == JobStatus.BLOCKED
            holder = conn.execute(self.q.HOLDER, {"job_id": job_id}).fetchone() if blocked else None
        doc = records.job_dict(row, executions)
        doc["blocked_by"] = records.holder_dict(holder)
        doc["policy"] = policy.sources(doc, int(row["chosen"]), declared)
        doc["depends_on"] = [records.linked_job_dict(r) for r in depends_on]
        doc["dependents"] = [records.linked_job_dict(r) for r in dependents]
        return doc

    def resolve_job_id(self, ref: str) -> str:
        """The full id of the one job `ref` names: its id as stored, the same in any case,
        or, shortened to at least `MIN_ID_PREFIX` characters, the start or the end of
        exactly one job's id (with or without its dashes: `ids.typed_forms`). Ids are
        UUIDs printed in lower case; operators copy them short, or from tools that print
        them in upper case or without dashes. Time-ordered ids made the same minute share
        their first 8 characters, so the tail is what tells them apart (`heartq demo`
        prints the last 8); a long enough start works too.

        Both readings are looked up, and a job found either way counts: an 8-character
        tail that happens to be the start of other ids is ambiguous, never taken for
        them. The start is a range of the primary key; the tail is one index probe on
        PostgreSQL and a read of the primary key's index on SQLite (`JOBS_BY_SUFFIX`)."""
        self.d.ensure_schema()
        text = ref.strip()
        if "\x00" in text:  # no id has one (and PostgreSQL cannot be asked about it)
            raise JobNotFound(ref)
        prefix, suffix = typed_forms(text)
        with self.d.read() as conn:
            whole = text.lower()
            if is_job_id(whole) and conn.execute(self.q.JOB_ID, {"job_id": whole}).fetchone():
                return whole
            if len(prefix.replace("-", "")) < MIN_ID_PREFIX:
                hint = f"a shortened id needs at least {MIN_ID_PREFIX} characters"
                raise JobNotFound(ref, hint if prefix else "")
            limit = AMBIGUOUS_SHOWN + 1
            bounds = id_range(prefix)
            starts = bounds and {"low": bounds[0], "high": bounds[1], "limit": limit}
            ends = {"suffix": suffix, "tail": suffix[-8:], "n": len(suffix), "limit": limit}
            rows = [*(run(conn, self.q.JOBS_BY_PREFIX, starts) if starts else []),
                    *run(conn, self.q.JOBS_BY_SUFFIX, ends)]  # fmt: skip
        found = {r["id"]: JobMatch(r["id"], r["task"], r["status"]) for r in rows}
        matches = [found[job_id] for job_id in sorted(found)]
        if not matches:
            raise JobNotFound(ref)
        if len(matches) > 1:
            more = len(matches) > AMBIGUOUS_SHOWN
            raise AmbiguousJobId(ref, matches[:AMBIGUOUS_SHOWN], more=more)
        return matches[0].id

    def dependency_results(self, job_id: str) -> list[DependencyEnd]:
        """The dependencies of a job that takes their results (a group's callback), in
        order: each one's status, result, and whether that result is still to come."""
        with self.d.read() as conn:
            rows = run(conn, self.q.DEPENDENCY_RESULTS, {"job_id": job_id})
        return [records.dependency_end(r) for r in rows]

    def await_end(self, job_id: str) -> JobEnd:
        self.d.ensure_schema()
        with self.d.write() as conn:
            conn.execute(self.q.MARK_AWAITED, {"job_id": job_id})
            row = conn.execute(self.q.JOB_END, {"job_id": job_id}).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        return records.job_end(job_id, row)

    def job_end(self, job_id: str) -> JobEnd:
        with self.d.read() as conn:
            row = conn.execute(self.q.JOB_END, {"job_id": job_id}).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        return records.job_end(job_id, row)

    def list_jobs(
        self,
        status: str | None = None,
        queue: str | None = None,
        limit: int = 100,
        claimed_ahead: bool | None = None,
    ) -> list[dict[str, Any]]:
        self.d.ensure_schema()
        params = {"status": status, "queue": queue, "limit": limit, "ahead": claimed_ahead}
        with self.d.read() as conn:
            rows = conn.execute(self.q.LIST_JOBS, params).fetchall()
        return [records.job_dict(row) for row in rows]

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
        self.d.ensure_schema()
        scan = max(scan, limit + 1)
        params: dict[str, Any] = {"status": status, "queue": queue, "task": task,
                                  "ahead": claimed_ahead, "before": before,
                                  "limit": limit + 1, "scan_offset": scan - 1}  # fmt: skip
        floor_of, page = (
            (self.q.BROWSE_FLOOR_BEFORE, self.q.BROWSE_JOBS_BEFORE)
            if before is not None
            else (self.q.BROWSE_FLOOR, self.q.BROWSE_JOBS)
        )
        with self.d.read() as conn:
            found = run(conn, floor_of, params)
            floor = found[0]["id"] if found else None  # None: the window reaches the start
            rows = run(conn, page, dict(params, floor=floor or LEAST_JOB_ID))
        if len(rows) > limit:  # one more than asked: the next page starts after the last
            rows = rows[:limit]
            next_before = rows[-1]["id"]
        else:  # a short page: older matches may lie below the window
            next_before = floor
        return JobPage([records.job_dict(row) for row in rows], next_before)

    def finished_per_minute(
        self, minutes: int = 60, now: float | None = None
    ) -> list[tuple[float, str, int]]:
        self.d.ensure_schema()
        with self.d.read() as conn:
            since = (self.d.now(conn, now) // 60 - (minutes - 1)) * 60
            rows = conn.execute(self.q.FINISHED_PER_MINUTE, {"since": since}).fetchall()
        return [(float(r["minute"]), r["status"], int(r["n"])) for r in rows]

    def count_jobs(self) -> list[tuple[str, str, int]]:
        return [(c.queue, c.status, c.count) for c in self.job_counts()]

    def job_counts(self) -> list[JobCount]:
        self.d.ensure_schema()
        with self.d.read() as conn:
            rows = conn.execute(self.q.COUNT_JOBS).fetchall()
        return [
            JobCount(r["queue"], r["status"], int(r["n"]), int(r["ahead"] or 0)) for r in rows
        ]

    def has_pending(
        self, queues: Sequence[str], now: float | None = None, retries: bool = True
    ) -> bool:
        self.d.ensure_schema()
        with self.d.read() as conn:
            # `now` as given: without one, the statement reads the time after its snapshot
            # (a time read before it could make a job released meanwhile look not due)
            params = {"queues": self.d.array(list(queues)), "now": now, "retries": retries}
            row = conn.execute(self.q.HAS_PENDING, params).fetchone()
        return bool(row["pending"])

    def concurrency_usage(self) -> list[dict[str, Any]]:
        self.d.ensure_schema()
        with self.d.read() as conn:
            rows = conn.execute(self.q.CONCURRENCY_USAGE).fetchall()
        return [
            {"key": r["key"], "running": int(r["running"]), "queued": int(r["queued"]),
             "limit": r["max_limit"]}
            for r in rows
        ]  # fmt: skip

    def rate_usage(self, now: float | None = None) -> list[dict[str, Any]]:
        self.d.ensure_schema()
        with self.d.read() as conn:
            rows = conn.execute(self.q.RATE_USAGE, {"now": self.d.clock(conn, now)}).fetchall()
        return [records.rate_usage(row) for row in rows]

    def fair_usage(self, counted: int = FAIR_COUNTED) -> list[dict[str, Any]]:
        self.d.ensure_schema()
        params = {"keys": FAIR_KEYS_READ, "counted": max(1, counted), "line": FAIR_LINE_READ}
        with self.d.read() as conn:
            rows = run(conn, self.q.FAIR_USAGE, params)
        return [
            {"queue": r["queue"], "key": r["key"], "queued": int(r["queued"]),
             "running": int(r["running"]), "more": bool(r["more"]),
             "weight": 1.0 if r["weight"] is None else float(r["weight"])}
            for r in rows
        ]  # fmt: skip

    def queue_waits(self, now: float | None = None) -> dict[str, QueueWait]:
        self.d.ensure_schema()
        waits = {}
        with self.d.read() as conn:
            t = self.d.now(conn, now)
            for row in conn.execute(self.q.QUEUE_WAITS, {"now": t}).fetchall():
                oldest_id = None
                if row["oldest_run_at"] is not None:
                    params = {"queue": row["queue"], "run_at": row["oldest_run_at"]}
                    found = conn.execute(self.q.OLDEST_RUNNABLE, params).fetchone()
                    oldest_id = found["id"] if found else None
                waits[row["queue"]] = records.queue_wait(row, t, oldest_id)
        return waits
