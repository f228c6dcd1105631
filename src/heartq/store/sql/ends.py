"""A job's end, written once whoever ends it: the fenced finish and the release of the
ended jobs' dependents.

Why one module: the worker's finish, a completion inside the task's transaction, a
release with a cancel pending, an operator's cancel and every reclaimer end jobs, and a
dependent must be released exactly once whichever of them ended its dependency
(`dependencies.py`). The roles that end jobs (`leases.py`, `reclaim.py`, `admin.py`)
each hold one `JobEnds` over their dialect and call it in their own transaction.
"""

from __future__ import annotations

import json
from typing import Any

from heartq.model import Lease
from heartq.store import records
from heartq.store.sql import dependencies
from heartq.store.sql.base import Dialect, drive, run, wake


class JobEnds:
    """The end of jobs, in the caller's transaction, over one dialect."""

    def __init__(self, dialect: Dialect) -> None:
        self.d = dialect
        self.q = dialect.q

    def apply_finishes(
        self,
        conn: Any,
        docs: list[dict[str, Any]],
        clock: float | None,
        worker_id: str | None = None,
    ) -> set[Lease]:
        """The fenced write shared by finish, a completion and every reclaimer, in the
        caller's transaction: only jobs still running under the execution a document names
        (and, `worker_id` given, under that worker: a lease holder's write; a reclaimer
        gives none, having read and locked the rows it finishes in this transaction)
        change, each one's execution row written, and the dependents of those that ended
        are released in the same transaction."""
        landed, _ = self.finish_statement(conn, json.dumps(docs), clock, False, worker_id)
        return landed

    def finish_statement(
        self,
        conn: Any,
        finishes: str,
        clock: float | None,
        defer: bool,
        worker_id: str | None = None,
    ) -> tuple[set[Lease], set[Lease]]:
        """`FINISH` of `finishes` (their documents as JSON text, encoded before the write
        began: SQLite's write lock is not held for it), then the release of the
        dependents of the jobs it ended; the leases that landed, and those it left alone
        because their job has dependents (`defer`, for a FINISH that commits by itself: a
        release in that one statement could miss an edge committed while it waited for a
        row's lock, its snapshot being older; the caller finishes those in a transaction
        of its own)."""
        params = {"finishes": finishes, "now": clock, "defer": defer, "worker_id": worker_id}
        rows = run(conn, self.q.FINISH, params)
        landed = [r for r in rows if not r["deferred"]]
        self.d.announce_ended(conn, records.awaited_ends(landed))
        self.release_dependents(conn, dependencies.ended_with_dependents(landed), clock)
        return records.leases(landed), records.leases(r for r in rows if r["deferred"])

    def release_dependents(self, conn: Any, ended: list[str], clock: float | None) -> None:
        """Release the waiting dependents of jobs that just ended in this transaction
        (`dependencies.release`), wake the queues that got runnable jobs and announce the
        awaited jobs it cancelled. Nothing at all when none of them has dependents."""
        if ended:
            done = drive(conn, dependencies.release(self.q, ended, self.d.array, clock))
            self.d.announce_ended(conn, done.awaited_ends)
            wake(self.d, conn, done.queues)
