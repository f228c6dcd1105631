"""Taking and holding leases: claims (by queue, and by id for a transport), the
transport sweeper's read, renewals, the pulse (what running tasks report, and the
cancels requested of a worker's attempts), checkpoints, and the ends a lease's holder records:
`finish`, completion inside the task's own transaction with its result after, and
`release` on shutdown.

Why together: every write here is made by the worker that takes or holds the lease,
fenced on `(job_id, execution_id)`, the worker that claimed it and `status = 'running'`,
and these are the hot statements (one per batch, most of them on `write_each`). The
worker travels as one parameter of each statement (`worker_id`), not in every job's
document: a worker's batches hold its own leases (`_by_worker`), so the fence costs no
byte per job. `due_for_publish` is a read,
kept beside `claim_ids` because it selects exactly what a transport's messages will ask
`claim_ids` to take. `crash_attempt` is called by lease holders too (it is part of the
`LeaseHolder` protocol), but it lives in `reclaim.py`: it is a reclaim of one attempt
(the same plan, fenced write and wake-up). What the dialect decides is asked of
`self.d` (its transactions, clock and how it binds a list: `Dialect` in `base.py`); the
rest of each operation is here, top to bottom, but the claim's keyed half (`keyed.py`).

A job's end is written once here whoever ends it (`JobEnds`): the fenced finish and the
settling of the ended jobs' dependents. The worker's finish, a completion inside the
task's transaction, a release with a cancel pending, an operator's cancel and every
reclaimer end jobs, and a dependent must be settled exactly once whichever of them ended
its dependency (`dependencies.py`). Why here: `FINISH` is a lease's fenced end, the
same statement whether its holder writes it or a reclaimer writes it for a holder that is
gone. The roles that end jobs (`LeaseOps` here, `reclaim.py`, `admin.py`) each hold one
`JobEnds` over their dialect and call it in their own transaction.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from heartq.errors import LeaseLost
from heartq.model import (
    Claim,
    ClaimedJob,
    Finish,
    JobStatus,
    Lease,
    Outcome,
    PulseReport,
    Renewal,
    RenewStatus,
    Report,
)
from heartq.store import documents, records
from heartq.store.sql import dependencies, fair
from heartq.store.sql.base import Dialect, Program, Rows, database_time, drive, run, wake
from heartq.store.sql.keyed import claim_keyed

T = TypeVar("T")


def _by_worker(items: Sequence[T], lease: Callable[[T], Lease]) -> list[tuple[str | None, list[T]]]:
    """`items` by the worker their leases name, for statements that take the worker as
    one parameter. A worker's batch names only itself: one group, found without
    building any (a batch of many workers' leases is split, one statement each)."""
    first = lease(items[0]).worker_id
    if all(lease(item).worker_id == first for item in items):
        return [(first, list(items))]
    groups: dict[str | None, list[T]] = {}
    for item in items:
        groups.setdefault(lease(item).worker_id, []).append(item)
    return list(groups.items())


def _each_job_once(items: list[T], job: Callable[[T], str]) -> list[list[T]]:
    """`items`, finishes of distinct attempts, in batches that name each job once:
    PostgreSQL's `FINISH` reads each deleted lease's finish from its batch by job id
    (`Batch.at`). One batch as a rule; where a worker ends two attempts of one job at
    once (the first was taken from it, and it claimed the job again), the later one goes
    in a batch after."""
    if len({job(item) for item in items}) == len(items):
        return [items]
    batches: list[list[T]] = []
    named: list[set[str]] = []
    for item in items:
        place = next((i for i, ids in enumerate(named) if job(item) not in ids), len(named))
        if place == len(named):
            batches.append([])
            named.append(set())
        batches[place].append(item)
        named[place].add(job(item))
    return batches


def _finish_job(finish: Finish) -> str:
    return finish.lease.job_id


def _doc_job(doc: dict[str, Any]) -> str:
    return str(doc["id"])


def _itself(lease: Lease) -> Lease:
    return lease


def _lease_doc(lease: Lease) -> dict[str, Any]:
    return {"id": lease.job_id, "eid": lease.execution_id}


TURNS_HELD = 5.0
"""Seconds a claim of a worker's queues takes turns after the claim in order found a job
with a fairness key waiting there (`LeaseOps.turns_until`): while keys keep coming, the claim in
order is tried once in that long, not before every claim; once they have gone, it is
back within that long."""


class LeaseOps:
    """The lease holder's operations of `SqlStore` (`LeaseHolder` in `store/interface.py`)."""

    def __init__(self, dialect: Dialect) -> None:
        self.d = dialect
        self.q = dialect.q
        self.ends = JobEnds(dialect)
        self.fair_waited: dict[tuple[str, ...], bool] = {}
        """Per set of queues, whether the last claim of them found a job with a fairness
        key waiting (SQLite, whose claim by fair shares is decided in Python): then the
        next asks that first (`KEYED_QUEUED`), and skips the claim of jobs without a key,
        which takes nothing while one waits. A hint: a statement fewer inside the write
        lock while keyed jobs wait, at worst one more when the last has gone."""
        self.line_waited: dict[tuple[str, ...], bool] = {}
        """Per set of queues, whether the last look found their jobs all in line (SQLite:
        jobs with a fairness key tagged, none to tag, none without a key; `KEYED_QUEUED`'s
        `line`): then the next claim takes its line first (`fair.claim_line`), and asks
        `KEYED_QUEUED` only for the slots that left. A hint: while a queue's jobs all take
        turns, a statement fewer a claim than asking first; at worst one more when that
        changed."""
        self.turns_until: dict[tuple[str, ...], float] = {}
        """Per set of queues claimed (their names, sorted), until when (`time.monotonic`)
        a claim of them takes turns at once (`CLAIM_ONE_QUEUE`, `CLAIM`), without first
        trying the claim in order (`CLAIM_IN_ORDER`, `CLAIM_QUEUES_IN_ORDER`, which
        answered that a job with a fairness key waits, and took nothing). A hint: while
        keyed jobs keep coming, one statement more every `TURNS_HELD` seconds; once they
        have gone, the claim in order again within as long."""

    def claim(
        self,
        worker_id: str,
        queues: Sequence[str],
        limit: int | Callable[[], int],
        lease: float,
        now: float | None = None,
        ahead: int = 0,
    ) -> Claim:
        if isinstance(limit, int) and limit <= 0 and ahead <= 0:
            return Claim()
        self.d.ensure_schema()
        with self.d.write_each() as conn:
            sent_at = time.monotonic()  # the connection (and SQLite's write lock) in hand
            if not isinstance(limit, int):  # the slots free now, after any wait for the lock
                limit = limit()
            params = {
                "worker_id": worker_id,
                "queues": self.d.array(list(queues)),
                "limit": limit,
                "lease": lease,
                "now": self.d.clock(conn, now),
                "ahead": False,
            }
            rows: list[Any] = []
            rate_wait = None
            if limit > 0:
                found = None  # KEYED_QUEUED's answer, once asked
                if self.line_waited.get(tuple(queues)) and self.d.fair is not None:
                    on = self.d.by_position(conn)
                    rows = fair.claim_line(self.d.fair, conn, on, params)
                if len(rows) < limit and self.fair_waited.get(tuple(queues)):
                    found = self._keyed_queued(conn, queues, params)
                # A line that filled fewer slots had no job without a key (its statement
                # takes none where one is queued): no claim of them.
                if not rows and (found is None or not found["fair"]):
                    rows = self._claim_rows(conn, queues, params)
                if len(rows) < limit:  # slots left: keyed jobs may take them
                    if found is None and self.d.fair is not None:
                        found = self._keyed_queued(conn, queues, params)
                    limited = dict(params, limit=limit - len(rows), claimed=len(rows))
                    more, rate_wait = claim_keyed(self.d, conn, limited, found)
                    rows += more
            # Ahead only once the slots are served, and only jobs without a key: a
            # keyed job held in a buffer would hold its key's running count or start.
            buffered: list[Any] = []
            unanswered = False
            if ahead > 0 and (limit <= 0 or len(rows) >= limit):
                try:
                    given = dict(params, limit=ahead, ahead=True)
                    buffered = self._claim_rows(conn, queues, given)
                except Exception:
                    # Each statement committed alone (PostgreSQL): the slots' jobs are the
                    # worker's already, so they are handed over (raising would leave them
                    # running unrenewed, to be reclaimed as crashed); the buffer waits for
                    # the next claim. In one transaction, nothing was taken: raise.
                    if not (rows and self.d.statements_commit_alone):
                        raise
                    unanswered = True  # it may have committed: the worker sweeps
        return Claim(
            records.claimed_jobs(rows, sent_at, worker_id),
            rate_wait,
            ahead=records.claimed_jobs(buffered, sent_at, worker_id),
            unanswered=unanswered,
        )

    def _keyed_queued(self, conn: Any, queues: Sequence[str], params: dict[str, Any]) -> Any:
        """`KEYED_QUEUED`'s row for a claim of `queues` (SQLite: the claim is one
        transaction, so asked outside `claim_keyed` its error is the claim's as inside),
        and whether a job with a fairness key waits noted for the next claim of them."""
        found = conn.execute(self.q.KEYED_QUEUED, params).fetchone()
        self.fair_waited[tuple(queues)] = bool(found["fair"])
        self.line_waited[tuple(queues)] = bool(found["line"])
        return found

    def _claim_rows(self, conn: Any, queues: Sequence[str], params: dict[str, Any]) -> Rows:
        """The claimed rows of jobs with neither a concurrency nor a rate key. A worker of
        one queue claims through `CLAIM_ONE_QUEUE`, a walk of that queue's claim index in
        its order (no sort of the backlog; on PostgreSQL a third cheaper than `CLAIM`'s
        per-queue walks), one of several through `CLAIM`; and first through
        `CLAIM_IN_ORDER` or `CLAIM_QUEUES_IN_ORDER`, the same without the turns of fair
        shares, unless that said lately that a job with a fairness key waits in those
        queues (`turns_until`): it then took nothing, and the claim with turns takes the
        slots.
        No execution row is written at a claim: the running attempt lives on its lease
        (PostgreSQL) or its job row (SQLite), and its execution row is written when it
        ends."""
        named = tuple(sorted(set(queues)))
        on = self.d.by_position(conn)  # `records.claimed_jobs` reads the rows by position
        one = len(named) == 1
        if one:
            params = dict(params, queue=named[0])
        if self.turns_until.get(named, 0.0) <= time.monotonic():
            in_order = self.q.CLAIM_IN_ORDER if one else self.q.CLAIM_QUEUES_IN_ORDER
            rows = run(on, in_order, params)
            if not rows or rows[-1][0] is not None:
                return rows
            self.turns_until[named] = time.monotonic() + TURNS_HELD
        return run(on, self.q.CLAIM_ONE_QUEUE if one else self.q.CLAIM, params)

    def start_ahead(
        self, leases: Sequence[Lease], lease: float, now: float | None = None
    ) -> list[Lease]:
        if not leases:
            return []
        started: set[Lease] = set()
        with self.d.write_each() as conn:
            clock = self.d.clock(conn, now)
            for worker_id, group in _by_worker(leases, _itself):
                params = {
                    **self.d.batch("leases", [_lease_doc(x) for x in group]),
                    "lease": lease,
                    "now": clock,
                    "worker_id": worker_id,
                }
                started |= records.leases(run(conn, self.q.START_AHEAD, params))
        return [x for x in leases if x in started]

    def claim_ids(
        self,
        worker_id: str,
        ids: Sequence[str],
        lease: float,
        now: float | None = None,
    ) -> list[ClaimedJob]:
        """Claim the jobs a transport's messages named, fenced like `claim`: only those
        still queued and runnable (a message is a wake-up, never a right to run: one
        for a job running elsewhere, finished or unknown claims nothing)."""
        unique = sorted(set(ids))
        if not unique:
            return []
        self.d.ensure_schema()
        with self.d.write_each() as conn:
            sent_at = time.monotonic()
            params = {
                "worker_id": worker_id,
                "ids": self.d.array(unique),
                "lease": lease,
                "now": self.d.clock(conn, now),
                "ahead": False,  # a transport's worker claims no further than its slots
            }
            rows = run(self.d.by_position(conn), self.q.CLAIM_IDS, params)
        return records.claimed_jobs(rows, sent_at, worker_id)

    def due_for_publish(
        self,
        queues: Sequence[str],
        since: float,
        waiting_since: float,
        limit: int,
        now: float | None = None,
    ) -> tuple[list[tuple[str, str]], float]:
        """For a transport's sweeper: `(job id, queue)` of the queued, runnable, unkeyed
        jobs of `queues` that fell due or were queued again after `since`, or have been
        runnable since `waiting_since` (database times), and the database's time now, the
        next pass's `since`."""
        self.d.ensure_schema()
        with self.d.read() as conn:
            clock = self.d.clock(conn, now)
            t = database_time(self.d, conn, clock)
            params = {
                "queues": self.d.array(list(queues)),
                "since": since,
                "waiting_since": waiting_since,
                "limit": limit,
                "now": clock,
            }
            rows = conn.execute(self.q.DUE_FOR_PUBLISH, params).fetchall()
        return [(str(r["id"]), str(r["queue"])) for r in rows], t

    def heartbeat(
        self,
        worker_id: str,
        renewals: Sequence[Renewal],
        lease: float,
        now: float | None = None,
        *,
        detach: Sequence[Lease] = (),
        sweep: bool = False,
    ) -> dict[Lease, RenewStatus]:
        docs = [documents.renewal_doc(r) for r in renewals]
        named = {r.lease for r in renewals}
        docs += [
            documents.renewal_doc(Renewal(x), detach=True) for x in dict.fromkeys(detach)
            if x not in named
        ]
        payload = self.d.batch("renewals", docs)
        with self.d.write_renewal() as conn:
            params = {
                **payload,
                "worker_id": worker_id,
                "lease": lease,
                "now": self.d.clock(conn, now),
            }
            if sweep:  # a walk of the worker's running attempts: after a claim that raised
                run(conn, self.q.SWEEP, params)
            rows = run(conn, self.q.HEARTBEAT, params)
        return records.renew_answers([r.lease for r in renewals], rows)

    def record_abandoned(self, worker_id: str, count: int) -> None:
        with self.d.write() as conn:
            params = {"worker_id": worker_id, "abandoned": count}
            conn.execute(self.q.RECORD_ABANDONED, params)

    def pulse(
        self, reports: Sequence[PulseReport], now: float | None = None
    ) -> dict[Lease, RenewStatus]:
        if not reports:
            return {}
        rows: Rows = []
        with self.d.write_each() as conn:
            clock = self.d.clock(conn, now)
            for worker_id, group in _by_worker(reports, _report_lease):
                # one report per lease (the last one wins), as in `finish`
                docs = {r.lease: documents.pulse_doc(r) for r in group}
                rows += self._store_reports(conn, list(docs.values()), clock, worker_id)
        return records.renew_answers([r.lease for r in reports], rows)

    def cancel_requests(self, worker_id: str, leases: Sequence[Lease]) -> list[Lease]:
        """The statement reads the jobs of `leases` by key; the answer is fenced on each
        lease's execution here: only an attempt asked about is reported."""
        if not leases:
            return []
        ids = self.d.array(sorted({lease.job_id for lease in leases}))
        with self.d.read() as conn:
            params = {"worker_id": worker_id, "ids": ids}
            rows = conn.execute(self.q.RUNNING_CANCELS, params).fetchall()
        asked = set(leases)
        found = [lease for lease in records.leases(rows) if lease in asked]
        return sorted(found, key=lambda lease: lease.job_id)

    def save_checkpoint(
        self, lease: Lease, checkpoint_json: str, now: float | None = None
    ) -> RenewStatus:
        with self.d.write() as conn:
            params = {
                "checkpoint": checkpoint_json,
                "job_id": lease.job_id,
                "execution_id": lease.execution_id,
                "worker_id": lease.worker_id,
                "now": self.d.clock(conn, now),
            }
            row = conn.execute(self.q.SAVE_CHECKPOINT, params).fetchone()
        return records.checkpoint_answer(lease, row)

    @contextlib.contextmanager
    def completing(
        self,
        lease: Lease,
        report: Callable[[], Report | None] | None = None,
        result: Callable[[], str | None] | None = None,
    ) -> Iterator[Any]:
        """A transaction for a task's own writes that also ends its job `succeeded`, fenced:
        the task writes its effects on the connection it is given; when the block ends,
        the job is completed in the same transaction if this attempt still holds it, else
        everything rolls back, the task's writes included, and `LeaseLost` is raised.
        `report()`, asked when the block ends, is what the task last reported (what it
        reported inside the block included), saved with the completion; `result()`, asked
        then too, the JSON of the result the task handed to the commit, stored with it
        (None: none was handed; what the task returns after is saved after, and the job
        carries `result_pending` until then)."""
        with self.d.write() as conn:
            with self.d.task_scope(conn) as task_conn:
                yield task_conn
            handed = None if result is None else result()
            doc = documents.finish_doc(
                lease.job_id,
                lease.execution_id,
                status=JobStatus.SUCCEEDED.value,
                outcome=Outcome.SUCCEEDED.value,
                result=handed,
                result_pending=handed is None,  # what the task returns after: waited for
            )
            last = None if report is None else report()
            if last is not None:
                pulse = documents.pulse_doc(PulseReport(lease, last))
                self._store_reports(conn, [pulse], self.d.clock(conn, None), lease.worker_id)
            # its dependents are settled here, in the task's transaction: a callback
            # that takes results waits for this one's (`result_pending`) when it starts
            clock = self.d.clock(conn, None)
            if lease not in self.ends.apply_finishes(conn, [doc], clock, lease.worker_id):
                raise LeaseLost(lease.job_id, lease.execution_id)

    def save_result(self, lease: Lease, result_json: str | None, lost: str | None = None) -> bool:
        with self.d.write() as conn:
            params = {
                "job_id": lease.job_id,
                "execution_id": lease.execution_id,
                "worker_id": lease.worker_id,
                "result": result_json,
                "lost": lost,
                "now": self.d.clock(conn, None),
            }
            rows = conn.execute(self.q.SAVE_RESULT, params).fetchall()
            self.d.announce_ended(conn, records.awaited_ends(rows))
        return bool(rows)

    def finish(self, finishes: Sequence[Finish], now: float | None = None) -> list[Lease]:
        if not finishes:
            return []
        lost: list[Lease] = []
        for worker_id, group in _by_worker(finishes, _finish_lease):
            # one finish a lease (the last one wins): a statement that read a lease's
            # finish from a batch that names it twice would apply either one
            last = list({f.lease: f for f in group}.values())
            for batch in _each_job_once(last, _finish_job):
                lost += self._finish_batch(worker_id, batch, now)
        return lost

    def _finish_batch(
        self, worker_id: str | None, finishes: Sequence[Finish], now: float | None
    ) -> list[Lease]:
        """`finish` of one worker's attempts, one a lease and one a job: the leases that did
        not land."""
        docs = {f.lease: documents.attempt_finish_doc(f) for f in finishes}
        reports = {f.lease: documents.pulse_doc(PulseReport(f.lease, f.report))
                   for f in finishes if f.report is not None}  # fmt: skip
        encoded = self.d.batch("finishes", list(docs.values()))
        with self.d.write_each() as conn:
            clock = self.d.clock(conn, now)
            if reports:  # only the finishes that carry one: no cost for the others
                self._store_reports(conn, list(reports.values()), clock, worker_id)
            defer = self.d.statements_commit_alone
            landed, deferred = self.ends.finish_statement(conn, encoded, clock, defer, worker_id)
        if deferred:  # jobs with dependents: finished and settled in one transaction
            with self.d.write() as conn:
                clock = self.d.clock(conn, now)
                again = [docs[x] for x in deferred]
                landed |= self.ends.apply_finishes(conn, again, clock, worker_id)
        if len(landed) == len(docs):  # every lease landed (the usual case): none to look up
            return []
        return [f.lease for f in finishes if f.lease not in landed]

    def _store_reports(
        self, conn: Any, docs: list[dict[str, Any]], clock: float | None, worker_id: str | None
    ) -> Rows:
        """What tasks reported (`PULSE`), fenced: for a pulse, and just before a finish or
        a completion on the same connection, so the job ends showing its last step."""
        params = {**self.d.batch("reports", docs), "now": clock, "worker_id": worker_id}
        return run(conn, self.q.PULSE, params)

    def release(self, leases: Sequence[Lease], now: float | None = None) -> list[Lease]:
        if not leases:
            return []
        rows: Rows = []
        with self.d.write() as conn:
            clock = self.d.clock(conn, now)
            for worker_id, group in _by_worker(leases, _itself):
                payload = self.d.batch("leases", [_lease_doc(x) for x in group])
                params = {**payload, "now": clock, "worker_id": worker_id}
                rows += run(conn, self.q.RELEASE, params)
            # a job whose cancel was pending ends cancelled here: its dependents too
            self.d.announce_ended(conn, records.awaited_ends(rows))
            self.ends.settle_dependents(conn, dependencies.ended_with_dependents(rows), clock)
        landed = records.leases(rows)
        return [lease for lease in leases if lease not in landed]


def _report_lease(report: PulseReport) -> Lease:
    return report.lease


def _finish_lease(finish: Finish) -> Lease:
    return finish.lease


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
        are settled in the same transaction."""
        landed: set[Lease] = set()
        for batch in _each_job_once(docs, _doc_job):
            ended, _ = self.finish_statement(
                conn, self.d.batch("finishes", batch), clock, False, worker_id
            )
            landed |= ended
        return landed

    def finish_statement(
        self,
        conn: Any,
        finishes: dict[str, Any],
        clock: float | None,
        defer: bool,
        worker_id: str | None = None,
    ) -> tuple[set[Lease], set[Lease]]:
        """`FINISH` of `finishes` (their documents as the dialect binds them, `Dialect.batch`,
        encoded before the write began: SQLite's write lock is not held for it), then the
        settling of the dependents of the jobs it ended; the leases that landed, and those
        it left alone because their job has dependents (`defer`, for a FINISH that commits
        by itself: settling in that one statement could miss an edge committed while it
        waited for a row's lock, its snapshot being older; the caller finishes those in a
        transaction of its own)."""
        params = {**finishes, "now": clock, "defer": defer, "worker_id": worker_id}
        ended = records.finish_answers(run(self.d.by_position(conn), self.q.FINISH, params))
        self.d.announce_ended(conn, ended.awaited)
        self.settle_dependents(conn, ended.with_dependents, clock, ended.failed_dependents)
        return ended.landed, ended.deferred

    def settle_dependents(
        self, conn: Any, ended: list[str], clock: float | None, failed: bool = True
    ) -> None:
        """Settle the waiting dependents of jobs that just ended in this transaction
        (`dependencies.settle`; `failed`: some of them did not succeed). Nothing at all
        when none of them has dependents."""
        if ended:
            self.apply(conn, dependencies.settle(self.q, ended, self.d.array, clock, failed))

    def apply(
        self, conn: Any, program: Program[dependencies.Settled]
    ) -> dependencies.Settled:
        """Run a program that moves dependents (a settling, the unblocking of a replay, the
        cancel of blocked jobs), then wake the queues that got runnable jobs and announce
        the awaited jobs it cancelled or blocked; what it did."""
        done = drive(conn, program)
        self.d.announce_ended(conn, done.awaited_ends)
        wake(self.d, conn, done.queues)
        return done
