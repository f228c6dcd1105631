"""The SQL store, written once: every operation of `Store` over a dialect's statements.

A backend is a dialect: its connections, its statements, and a few hooks where it truly
needs something else. Everything else (which statements an operation runs, in which
transaction, with which parameters, and what their rows mean) lives here, so a feature is
written once for SQLite and PostgreSQL.

What a dialect provides (`SQLiteStore` and `PostgresStore` are the two):

- `q`: its `queries.py`, with the same statement names in both dialects (`CLAIM`,
  `HEARTBEAT`, `FINISH`, `RELEASE`, ...), so one can be diffed against the other. A
  statement is a string, or a tuple of strings run in order in the same transaction
  with the same parameters, the last one's rows being the answer (SQLite has no
  data-modifying CTE, so its `HEARTBEAT` is two statements where PostgreSQL has one).
- `_write()` / `_read()`: a write transaction and a read.
- `_now(conn, now)`: the database's time as a number; `_clock(conn, now)`: what its
  statements take as `now` (SQLite: that number, so every statement of the transaction
  agrees; PostgreSQL: `now` as given, `None` meaning the transaction's `now()`).
- `_array(values)`: how a list of ids is bound (SQLite: a JSON text read with
  `json_each`; PostgreSQL: a `text[]`).
- `_is_duplicate(exc)`: whether an error is a duplicate job id.
- hooks with a default: `_wake` (PostgreSQL NOTIFYs idle workers), `_insert_jobs`
  (SQLite binds a lone job by value, cheaper than parsing JSON for one row), `_claim_rows`
  (SQLite writes the claim's executions with a second statement), `_lock_free` and
  `_forget_workers` (how a namesake's liveness lock is judged, and cleaned up).
- `migrate`, `close`, `liveness_hold`, `liveness_probe`, `liveness_suspects`, `listen`.

Backends never log: events are emitted by the worker and the maintenance pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from importlib import resources
from types import ModuleType
from typing import Any

from heartq import policy
from heartq.errors import AmbiguousJobId, ConfigError, DuplicateJob, JobNotFound, LeaseLost
from heartq.model import (
    CancelResult,
    ClaimedJob,
    Finish,
    JobEnd,
    JobPage,
    JobStatus,
    Lease,
    LivenessChange,
    NewJob,
    Outcome,
    PruneCounts,
    QueueWait,
    Reclaimed,
    Reconciliation,
    Renewal,
    RenewStatus,
    StaleWorker,
    TaskPolicy,
    TickPlan,
    WorkerInfo,
)
from heartq.payload import MAX_DURATION
from heartq.store import documents, reclaim, records, serialize
from heartq.store.interface import LivenessHandle

MIN_ID_PREFIX = 8
"""A shortened job id must have at least 8 characters (what `heartq demo` prints)."""
AMBIGUOUS_SHOWN = 5
"""An ambiguous prefix's error names at most 5 of the ids it matches."""

MAX_DEAD_AGE = 1000 * 365 * 86400.0
"""A purge's "dead for longer than" is cut to 1000 years: no job died earlier, so the
answer is the same, and the database's dates stay in range (PostgreSQL refuses an
interval of 1e300 seconds, or `inf`)."""
PRUNE_BATCH = 10_000
"""Finished jobs deleted per prune pass, so one pass never holds locks for long."""
ALWAYS_IN_CONTACT = 1e18
"""The contact of a caller that is not a worker: it judges as if it had always seen the
database (seconds; a finite number every dialect binds as a float)."""

Statement = str | tuple[str, ...]
Step = tuple[Statement, dict[str, Any]]
"""A statement with its parameters, for operations that run on someone else's connection."""
Rows = list[Any]


def migration_scripts(package: str) -> list[tuple[int, str]]:
    """A dialect's migrations (`<package>/migrations/NNNN_name.sql`), oldest first."""
    folder = resources.files(package) / "migrations"
    found = [
        (int(entry.name.split("_", 1)[0]), entry.read_text("utf-8"))
        for entry in folder.iterdir()
        if entry.name.endswith(".sql")
    ]
    return sorted(found)


class SqlStore:
    """`Store` over SQL. See the module docstring for what a dialect provides."""

    q: ModuleType
    url: str
    supports_notify: bool = False
    liveness_grace: float = 0.0
    _migrated: bool = False

    # -- dialect hooks -------------------------------------------------------------------
    def migrate(self) -> int:
        raise NotImplementedError

    def _write(self) -> contextlib.AbstractContextManager[Any]:
        raise NotImplementedError

    def _read(self) -> contextlib.AbstractContextManager[Any]:
        raise NotImplementedError

    def _write_each(self) -> contextlib.AbstractContextManager[Any]:
        """For the hot operations that are one statement (claim, finish, heartbeat): a
        connection on which each statement commits by itself where that saves round
        trips (PostgreSQL: no BEGIN and COMMIT). A step that needs more than one
        statement opens a transaction of its own. Default: `_write()`, one transaction."""
        return self._write()

    def _now(self, conn: Any, now: float | None) -> float:
        raise NotImplementedError

    def _clock(self, conn: Any, now: float | None) -> float | None:
        raise NotImplementedError

    def _array(self, values: Sequence[str]) -> Any:
        raise NotImplementedError

    def _is_duplicate(self, exc: Exception) -> bool:
        raise NotImplementedError

    def _wake_steps(self, queues: Iterable[str]) -> list[Step]:
        """The statements that tell idle workers jobs are runnable in `queues` (default:
        none, nobody hears)."""
        return []

    def _announce_ended(self, conn: Any, job_ids: Sequence[str]) -> None:
        """Tell waiters (`App.result`) that these jobs ended (default: nobody hears; they
        poll)."""

    def _insert_steps(self, docs: list[dict[str, Any]], clock: float | None) -> list[Step]:
        """The statements that insert new jobs (default: the whole batch as one JSON
        parameter)."""
        return [(self.q.INSERT_JOBS, {"jobs": json.dumps(docs), "now": clock})]

    def _borrow(self, connection: Any) -> contextlib.AbstractContextManager[Any]:
        """The caller's connection, inside its open transaction, made ready for heartq's
        statements (something with `execute` whose rows read by column name) and put back
        as it was afterwards. `ConfigError` for a connection this backend cannot use."""
        raise NotImplementedError

    def _borrow_async(self, connection: Any) -> contextlib.AbstractAsyncContextManager[Any]:
        """`_borrow` for an asyncio connection (default: the backend has none)."""
        raise ConfigError(
            f"{type(self).__name__} takes no asyncio connection "
            f"({type(connection).__name__}): pass its connection to enqueue() instead"
        )

    def _task_scope(self, conn: Any) -> contextlib.AbstractContextManager[Any]:
        """Inside `completing`: heartq's write connection as the task writes its effects
        on it, with the database's own defaults for the task's names (default: as is)."""
        return contextlib.nullcontext(conn)

    def _claim_rows(self, conn: Any, params: dict[str, Any]) -> Rows:
        """The claimed rows, their executions written (default: one statement does both)."""
        return self._run(conn, self.q.CLAIM, params)

    def _claim_by_ids(self, conn: Any, params: dict[str, Any]) -> Rows:
        """The jobs `params["ids"]` names that are queued and runnable, claimed, their
        executions written (default: one statement does both)."""
        return self._run(conn, self.q.CLAIM_IDS, params)

    def _claim_keyed(self, conn: Any, params: dict[str, Any]) -> Rows:
        """Claimed jobs with a concurrency key, never more of a key running than its
        limit, executions written (default: one statement does it all, in the claim's
        transaction; PostgreSQL, with many claimers at once, locks the keys first, in a
        transaction of its own). `params["claimed"]`: how many unkeyed jobs this claim
        took already."""
        return self._run(conn, self.q.CLAIM_KEYED, params)

    def _lock_free(self, namesake: Mapping[str, Any]) -> bool | None:
        """Whether a namesake's liveness lock is free (default: the `NAMESAKES` row says);
        None: free, but not yet for the store's `liveness_grace`."""
        return bool(namesake["lock_free"])

    def _note_locks(
        self, conn: Any, clock: float | None, free: Sequence[str], held: Sequence[str]
    ) -> None:
        """Note which namesakes' locks were found free (suspected) and which held
        (default: nothing to note, a store whose free lock is a dead process has no
        grace)."""

    def _forget_workers(self, worker_ids: Sequence[str]) -> None:
        """Clean up after workers found gone and reclaimed (default: nothing to clean)."""

    def liveness_hold(
        self, worker_id: str, on_change: Callable[[LivenessChange], None] | None = None
    ) -> LivenessHandle:
        raise NotImplementedError

    # -- plumbing ------------------------------------------------------------------------
    def migrations(self) -> list[tuple[int, str]]:
        """This dialect's schema migrations, oldest first: `(version, script)`."""
        return migration_scripts(type(self).__module__.rsplit(".", 1)[0])

    def _wake(self, conn: Any, queues: Iterable[str]) -> None:
        """Tell idle workers that jobs are runnable in `queues`."""
        for statement, params in self._wake_steps(queues):
            self._run(conn, statement, params)

    def _insert_jobs(self, conn: Any, docs: list[dict[str, Any]], clock: float | None) -> None:
        for statement, params in self._insert_steps(docs, clock):
            self._run(conn, statement, params)

    @staticmethod
    def _run(conn: Any, statement: Statement, params: Mapping[str, Any]) -> Rows:
        """Run a statement (or each of a tuple of them, in order); the last one's rows."""
        for text in statement if isinstance(statement, tuple) else (statement,):
            cursor = conn.execute(text, params)
        return cursor.fetchall() if cursor.description else []

    def reach(self) -> None:
        """Default: a read transaction that runs nothing (opens the connection)."""
        with self._read():
            pass

    def resize_pool(self, size: int) -> None:
        """Default: no pool to resize (SQLite keeps one connection per thread)."""

    def ensure_schema(self) -> None:
        if not self._migrated:
            self.migrate()

    def _time(self, conn: Any, clock: float | None) -> float:
        """The transaction's time as a number, from what `_clock` gave."""
        return clock if clock is not None else self._now(conn, None)

    def clock(self) -> float:
        with self._read() as conn:
            return self._now(conn, None)

    # -- client --------------------------------------------------------------------------
    def enqueue(
        self, jobs: Sequence[NewJob], now: float | None = None, connection: Any = None
    ) -> list[str]:
        docs = [documents.new_job_doc(job) for job in jobs]
        if not docs:
            return []
        self.ensure_schema()
        if connection is not None:
            steps = self._enqueue_steps(docs, now)
            with self._borrow(connection) as conn:
                answers = [self._run(conn, statement, params) for statement, params in steps]
            return self._holders(docs, answers)
        try:
            if self._insert_and_wake(docs, now):
                return [str(d["id"]) for d in docs]
            with self._write() as conn:
                clock = self._clock(conn, now)
                self._delay_until_eta(conn, docs, clock)
                answers = [self._run(conn, s, p) for s, p in self._job_steps(docs, clock)]
                self._wake(conn, {str(d["queue"]) for d in docs})
        except Exception as exc:
            if self._is_duplicate(exc):
                raise DuplicateJob(f"a job with one of these ids already exists: {exc}") from None
            raise
        return self._holders(docs, answers)

    async def enqueue_async(self, jobs: Sequence[NewJob], connection: Any) -> list[str]:
        docs = [documents.new_job_doc(job) for job in jobs]
        if not docs:
            return []
        await asyncio.to_thread(self.ensure_schema)
        steps = await asyncio.to_thread(self._enqueue_steps, docs, None)
        answers: list[Rows] = []
        async with self._borrow_async(connection) as conn:
            for statement, params in steps:
                for text in statement if isinstance(statement, tuple) else (statement,):
                    cursor = await conn.execute(text, params)
                answers.append(await cursor.fetchall() if cursor.description else [])
        return self._holders(docs, answers)

    def _insert_and_wake(self, docs: list[dict[str, Any]], now: float | None) -> bool:
        """Store jobs that need nothing but an insert (no unique key, no eta) and wake
        their queues in one statement that commits by itself, where the dialect has one
        (PostgreSQL: one round trip instead of four). False, having done nothing: the
        dialect has none, or these jobs need more; the caller then opens a transaction.
        Default: none."""
        return False

    def _job_steps(self, docs: list[dict[str, Any]], clock: float | None) -> list[Step]:
        """The statements that store `docs`: jobs without a unique key in one batch, then
        one step per job with a key, whose answer is the job holding the key (that one,
        or the one already there): so a key met twice in one batch makes one job too."""
        plain = [d for d in docs if d["unique_key"] is None]
        steps = self._insert_steps(plain, clock) if plain else []
        keyed = [d for d in docs if d["unique_key"] is not None]
        return steps + [(self.q.ENQUEUE_UNIQUE, dict(d, now=clock)) for d in keyed]

    @staticmethod
    def _holders(docs: list[dict[str, Any]], answers: list[Rows]) -> list[str]:
        """Each job's id as the caller gets it: a job with a unique key answers the id of
        the job that holds the key (the answers of its steps come last, in order)."""
        keyed = [d for d in docs if d["unique_key"] is not None]
        if keyed:
            for doc, rows in zip(keyed, answers[len(answers) - len(keyed) :], strict=True):
                doc["id"] = rows[0]["id"]  # the new job's, or the one found
        return [str(d["id"]) for d in docs]

    def list_schedules(self) -> list[dict[str, Any]]:
        self.ensure_schema()
        with self._read() as conn:
            rows = conn.execute(self.q.LIST_SCHEDULES).fetchall()
        return [dict(row) for row in rows]

    def tick_schedule(
        self,
        name: str,
        task: str,
        spec: str,
        plan: Callable[[float | None, float], TickPlan],
        make_jobs: Callable[[Sequence[float]], Sequence[NewJob]],
        by: str,
        now: float | None = None,
    ) -> list[str]:
        self.ensure_schema()
        with self._write() as conn:
            clock = self._clock(conn, now)
            params: dict[str, Any] = {"name": name, "task": task, "spec": spec, "now": clock}
            conn.execute(self.q.ENSURE_SCHEDULE, params)
            row = conn.execute(self.q.LOCK_SCHEDULE, params).fetchone()
            last = None if row["last_tick"] is None else float(row["last_tick"])
            due = plan(last, self._time(conn, clock))
            docs = [documents.new_job_doc(job) for job in make_jobs(due.ticks)]
            answers = [self._run(conn, st, p) for st, p in self._job_steps(docs, clock)]
            ids = self._holders(docs, answers)
            params.update(
                last_tick=due.last_tick,
                next_tick=due.next_tick,
                last_job_id=ids[-1] if ids else None,
                by=by,
            )
            conn.execute(self.q.UPDATE_SCHEDULE, params)
            if docs:
                self._wake(conn, {str(d["queue"]) for d in docs})
        return ids

    def _enqueue_steps(self, docs: list[dict[str, Any]], now: float | None) -> list[Step]:
        """An enqueue into the caller's transaction, as statements: the database's time is
        read first, on a connection of heartq's own (the caller's transaction may be old,
        and its `now()` with it), then the inserts (the unique ones' answers last) and the
        wake-ups (a NOTIFY is delivered by the caller's commit, and only by it)."""
        clock = now if now is not None else self.clock()
        self._delay_until_eta(None, docs, clock)
        queues = {str(d["queue"]) for d in docs}
        wake = self._wake_steps(queues)
        return wake + self._job_steps(docs, clock)

    def _delay_until_eta(self, conn: Any, docs: list[dict[str, Any]], clock: float | None) -> None:
        """A job given an `eta` waits from now until then, by the database's clock (an eta
        already past means now: it does not jump ahead of jobs that waited)."""
        if any(doc["run_at"] is not None for doc in docs):
            t = self._time(conn, clock)
            for doc in docs:
                if doc["run_at"] is not None:
                    doc["delay"] = min(MAX_DURATION, max(0.0, doc["run_at"] - t))

    def get_job(self, job_id: str) -> dict[str, Any]:
        self.ensure_schema()
        with self._read() as conn:
            row = conn.execute(self.q.GET_JOB, {"job_id": job_id}).fetchone()
            if row is None:
                raise JobNotFound(job_id)
            executions = conn.execute(self.q.GET_EXECUTIONS, {"job_id": job_id}).fetchall()
            declared = self._task_policies(conn, [row["task"]]).get(row["task"])
        doc = serialize.job_dict(row, executions)
        doc["policy"] = policy.sources(doc, int(row["chosen"]), declared)
        return doc

    def resolve_job_id(self, ref: str) -> str:
        """The full id of the one job `ref` names: its id as stored, the same in any case,
        or a unique prefix of at least `MIN_ID_PREFIX` characters, or else a unique tail
        that long. Ids are UUIDs printed in lower case; operators copy them short or from
        tools that print them in upper case. Time-ordered ids made together share their
        first characters, so `heartq demo` prints their last 8 (random) characters.

        The prefix is read as a range of the primary key (`prefix <= id < next`), so it
        costs an index range scan however many jobs there are; a tail is looked for (a
        scan) only when no id starts with what was typed."""
        self.ensure_schema()
        text = ref.strip()
        prefix = text.lower().rstrip("-")
        with self._read() as conn:
            for candidate in dict.fromkeys((text, text.lower())):
                if conn.execute(self.q.JOB_ID, {"job_id": candidate}).fetchone():
                    return candidate
            if len(prefix) < MIN_ID_PREFIX:
                hint = f"a shortened id needs at least {MIN_ID_PREFIX} characters"
                raise JobNotFound(ref, hint if prefix else "")
            params = {
                "low": prefix,
                "high": prefix[:-1] + chr(ord(prefix[-1]) + 1),
                "n": len(prefix),
                "limit": AMBIGUOUS_SHOWN + 1,
            }
            ids = [r["id"] for r in conn.execute(self.q.JOBS_BY_PREFIX, params).fetchall()]
            if not ids:  # the tail `heartq demo` prints (ids that start alike end apart)
                params = {"suffix": prefix, "n": len(prefix), "limit": AMBIGUOUS_SHOWN + 1}
                rows = conn.execute(self.q.JOBS_BY_SUFFIX, params).fetchall()
                ids = [r["id"] for r in rows]
        if not ids:
            raise JobNotFound(ref)
        if len(ids) > 1:
            raise AmbiguousJobId(ref, ids[:AMBIGUOUS_SHOWN], more=len(ids) > AMBIGUOUS_SHOWN)
        return str(ids[0])

    def await_end(self, job_id: str) -> JobEnd:
        self.ensure_schema()
        with self._write() as conn:
            conn.execute(self.q.MARK_AWAITED, {"job_id": job_id})
            row = conn.execute(self.q.JOB_END, {"job_id": job_id}).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        return records.job_end(job_id, row)

    def job_end(self, job_id: str) -> JobEnd:
        with self._read() as conn:
            row = conn.execute(self.q.JOB_END, {"job_id": job_id}).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        return records.job_end(job_id, row)

    # -- task declarations ---------------------------------------------------------------
    def _task_policies(self, conn: Any, names: Sequence[str] | None) -> dict[str, TaskPolicy]:
        params = {"all": names is None, "names": self._array(list(names or []))}
        rows = conn.execute(self.q.TASK_POLICIES, params).fetchall()
        return {row["name"]: records.task_policy(row) for row in rows}

    def task_policies(self, names: Sequence[str] | None = None) -> dict[str, TaskPolicy]:
        self.ensure_schema()
        with self._read() as conn:
            return self._task_policies(conn, names)

    def declare_tasks(
        self, policies: Sequence[TaskPolicy], worker_id: str, now: float | None = None
    ) -> list[str]:
        if not policies:
            return []
        self.ensure_schema()
        docs = [documents.task_doc(p) for p in policies]
        with self._write() as conn:
            before = self._task_policies(conn, [p.name for p in policies])
            params = {"tasks": json.dumps(docs), "worker_id": worker_id}
            conn.execute(self.q.DECLARE_TASKS, dict(params, now=self._clock(conn, now)))
        return [p.name for p in policies if not policy.same(before.get(p.name), p)]

    def reroute_jobs(
        self, names: Sequence[str], now: float | None = None, job_ids: Sequence[str] | None = None
    ) -> int:
        if not names:
            return 0
        self.ensure_schema()
        with self._write() as conn:
            params = {
                "names": self._array(list(names)),
                "all": job_ids is None,
                "ids": self._array(list(job_ids or [])),
                "now": self._clock(conn, now),
                **policy.BIT_PARAMS,
            }
            rows = self._run(conn, self.q.REROUTE_JOBS, params)
            self._wake(conn, {r["queue"] for r in rows})
        return len(rows)

    def list_jobs(
        self, status: str | None = None, queue: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        self.ensure_schema()
        params = {"status": status, "queue": queue, "limit": limit}
        with self._read() as conn:
            rows = conn.execute(self.q.LIST_JOBS, params).fetchall()
        return [serialize.job_dict(row) for row in rows]

    def browse_jobs(
        self,
        status: str | None = None,
        queue: str | None = None,
        task: str | None = None,
        before: str | None = None,
        limit: int = 50,
        scan: int = 10_000,
    ) -> JobPage:
        self.ensure_schema()
        scan = max(scan, limit + 1)
        params: dict[str, Any] = {"status": status, "queue": queue, "task": task,
                                  "before": before, "limit": limit + 1,
                                  "scan_offset": scan - 1}  # fmt: skip
        floor_of, page = (
            (self.q.BROWSE_FLOOR_BEFORE, self.q.BROWSE_JOBS_BEFORE)
            if before is not None
            else (self.q.BROWSE_FLOOR, self.q.BROWSE_JOBS)
        )
        with self._read() as conn:
            found = self._run(conn, floor_of, params)
            floor = found[0]["id"] if found else None  # None: the window reaches the start
            rows = self._run(conn, page, dict(params, floor=floor or ""))
        if len(rows) > limit:  # one more than asked: the next page starts after the last
            rows = rows[:limit]
            next_before = rows[-1]["id"]
        else:  # a short page: older matches may lie below the window
            next_before = floor
        return JobPage([serialize.job_dict(row) for row in rows], next_before)

    def finished_per_minute(
        self, minutes: int = 60, now: float | None = None
    ) -> list[tuple[float, str, int]]:
        self.ensure_schema()
        with self._read() as conn:
            since = (self._now(conn, now) // 60 - (minutes - 1)) * 60
            rows = conn.execute(self.q.FINISHED_PER_MINUTE, {"since": since}).fetchall()
        return [(float(r["minute"]), r["status"], int(r["n"])) for r in rows]

    def count_jobs(self) -> list[tuple[str, str, int]]:
        self.ensure_schema()
        with self._read() as conn:
            return [(r["queue"], r["status"], r["n"]) for r in conn.execute(self.q.COUNT_JOBS)]

    def has_pending(self, queues: Sequence[str], now: float | None = None) -> bool:
        self.ensure_schema()
        with self._read() as conn:
            params = {"queues": self._array(list(queues)), "now": self._clock(conn, now)}
            row = conn.execute(self.q.HAS_PENDING, params).fetchone()
        return bool(row["pending"])

    def concurrency_usage(self) -> list[dict[str, Any]]:
        self.ensure_schema()
        with self._read() as conn:
            rows = conn.execute(self.q.CONCURRENCY_USAGE).fetchall()
        return [
            {"key": r["key"], "running": int(r["running"]), "queued": int(r["queued"]),
             "limit": r["max_limit"]}
            for r in rows
        ]  # fmt: skip

    def queue_waits(self, now: float | None = None) -> dict[str, QueueWait]:
        self.ensure_schema()
        waits = {}
        with self._read() as conn:
            t = self._now(conn, now)
            for row in conn.execute(self.q.QUEUE_WAITS, {"now": t}).fetchall():
                oldest_id = None
                if row["oldest_run_at"] is not None:
                    params = {"queue": row["queue"], "run_at": row["oldest_run_at"]}
                    found = conn.execute(self.q.OLDEST_RUNNABLE, params).fetchone()
                    oldest_id = found["id"] if found else None
                waits[row["queue"]] = records.queue_wait(row, t, oldest_id)
        return waits

    def cancel_job(
        self, job_id: str, now: float | None = None, by: str | None = None
    ) -> CancelResult:
        self.ensure_schema()
        with self._write() as conn:
            row = conn.execute(self.q.JOB_STATUS, {"job_id": job_id}).fetchone()
            if row is None:
                raise JobNotFound(job_id)
            params = {"job_id": job_id, "now": self._clock(conn, now), "by": by}
            if row["status"] == JobStatus.QUEUED:
                rows = conn.execute(self.q.CANCEL_QUEUED, params).fetchall()
                self._announce_ended(conn, records.awaited_ends(rows))
                return CancelResult.CANCELLED
            if row["status"] == JobStatus.RUNNING:
                conn.execute(self.q.REQUEST_CANCEL, params)
                return CancelResult.CANCEL_REQUESTED
            return CancelResult.ALREADY_FINISHED

    def replay_dead(
        self, job_ids: Sequence[str] | None = None, now: float | None = None
    ) -> list[str]:
        self.ensure_schema()
        with self._write() as conn:
            params = {
                "now": self._clock(conn, now),
                "all": job_ids is None,
                "ids": self._array(list(job_ids or [])),
            }
            rows = self._run(conn, self.q.REPLAY_DEAD, params)
            self._wake(conn, {r["queue"] for r in rows})
        return [r["id"] for r in rows]

    def purge_dead(self, older_than: float | None = None, now: float | None = None) -> int:
        return len(self.purge_dead_ids(older_than, now))

    def purge_dead_ids(
        self, older_than: float | None = None, now: float | None = None, dry_run: bool = False
    ) -> list[str]:
        """The ids of the dead jobs purged (all, or those dead for over `older_than`
        seconds); with `dry_run`, those that would be, nothing deleted (what an operator
        is asked to confirm)."""
        self.ensure_schema()
        if older_than is not None:
            older_than = min(older_than, MAX_DEAD_AGE)
        with self._write() as conn:
            params = {"now": self._clock(conn, now), "older_than": older_than}
            ids = [r["id"] for r in conn.execute(self.q.SELECT_PURGEABLE_DEAD, params)]
            if not dry_run:
                self._delete_jobs(conn, ids)
        return ids

    def _delete_jobs(self, conn: Any, ids: list[str]) -> None:
        if ids:
            params = {"ids": self._array(ids)}
            conn.execute(self.q.DELETE_EXECUTIONS_OF, params)
            conn.execute(self.q.DELETE_JOBS, params)

    # -- the worker's side ---------------------------------------------------------------
    def claim(
        self,
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        lease: float,
        now: float | None = None,
    ) -> list[ClaimedJob]:
        if limit <= 0:
            return []
        self.ensure_schema()
        with self._write_each() as conn:
            sent_at = time.monotonic()  # the connection (and SQLite's write lock) in hand
            params = {
                "worker_id": worker_id,
                "queues": self._array(list(queues)),
                "limit": limit,
                "lease": lease,
                "now": self._clock(conn, now),
            }
            rows = self._claim_rows(conn, params)
            if len(rows) < limit:  # slots left: jobs with a concurrency key may take them
                keyed = dict(params, limit=limit - len(rows), claimed=len(rows))
                rows += self._claim_keyed(conn, keyed)
        return records.claimed_jobs(rows, sent_at)

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
        self.ensure_schema()
        with self._write_each() as conn:
            sent_at = time.monotonic()
            params = {
                "worker_id": worker_id,
                "ids": self._array(unique),
                "lease": lease,
                "now": self._clock(conn, now),
            }
            rows = self._claim_by_ids(conn, params)
        return records.claimed_jobs(rows, sent_at)

    def due_for_publish(
        self,
        queues: Sequence[str],
        since: float,
        stale_before: float,
        limit: int,
        now: float | None = None,
    ) -> tuple[list[tuple[str, str]], float]:
        """For a transport's sweeper: `(job id, queue)` of the queued, runnable, unkeyed
        jobs of `queues` that fell due or were requeued after `since`, or have been
        runnable since `stale_before` (database times), and the database's time now, the
        next pass's `since`."""
        self.ensure_schema()
        with self._read() as conn:
            clock = self._clock(conn, now)
            t = self._time(conn, clock)
            params = {
                "queues": self._array(list(queues)),
                "since": since,
                "stale_before": stale_before,
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
    ) -> dict[Lease, RenewStatus]:
        payload = json.dumps([documents.renewal_doc(r) for r in renewals])
        with self._write_each() as conn:
            params = {
                "worker_id": worker_id,
                "renewals": payload,
                "lease": lease,
                "now": self._clock(conn, now),
            }
            rows = self._run(conn, self.q.HEARTBEAT, params)
        return records.renew_answers(renewals, rows)

    def save_checkpoint(
        self, lease: Lease, checkpoint_json: str, now: float | None = None
    ) -> RenewStatus:
        with self._write() as conn:
            params = {
                "checkpoint": checkpoint_json,
                "job_id": lease.job_id,
                "execution_id": lease.execution_id,
                "now": self._clock(conn, now),
            }
            row = conn.execute(self.q.SAVE_CHECKPOINT, params).fetchone()
        return records.checkpoint_answer(lease, row)

    @contextlib.contextmanager
    def completing(self, lease: Lease) -> Iterator[Any]:
        """A transaction for a task's own writes that also ends its job `succeeded`, fenced:
        the task writes its effects on the connection it is given; when the block ends,
        the job is completed in the same transaction if this attempt still holds it, else
        everything rolls back, the task's writes included, and `LeaseLost` is raised."""
        doc = documents.finish_doc(
            lease.job_id,
            lease.execution_id,
            status=JobStatus.SUCCEEDED.value,
            outcome=Outcome.SUCCEEDED.value,
            result_pending=True,  # what the task returns after; waiters wait for it
        )
        with self._write() as conn:
            with self._task_scope(conn) as task_conn:
                yield task_conn
            params = {"finishes": json.dumps([doc]), "now": self._clock(conn, None)}
            if lease not in records.leases(self._run(conn, self.q.FINISH, params)):
                raise LeaseLost(lease.job_id, lease.execution_id)

    def save_result(self, lease: Lease, result_json: str | None) -> bool:
        with self._write() as conn:
            params = {
                "job_id": lease.job_id,
                "execution_id": lease.execution_id,
                "result": result_json,
                "now": self._clock(conn, None),
            }
            rows = conn.execute(self.q.SAVE_RESULT, params).fetchall()
            self._announce_ended(conn, records.awaited_ends(rows))
        return bool(rows)

    def finish(self, finishes: Sequence[Finish], now: float | None = None) -> list[Lease]:
        if not finishes:
            return []
        # one document per lease (the last one wins): an UPDATE ... FROM a batch that names
        # a row twice would apply either one, perhaps a different one to each table
        docs = {f.lease: documents.attempt_finish_doc(f) for f in finishes}
        with self._write_each() as conn:
            landed = self._apply_finishes(conn, list(docs.values()), self._clock(conn, now))
        return [f.lease for f in finishes if f.lease not in landed]

    def _apply_finishes(
        self, conn: Any, docs: list[dict[str, Any]], clock: float | None
    ) -> set[Lease]:
        """The fenced write shared by finish and every reclaimer: only jobs still running
        under the execution a document names change, with their executions."""
        rows = self._run(conn, self.q.FINISH, {"finishes": json.dumps(docs), "now": clock})
        self._announce_ended(conn, records.awaited_ends(rows))
        return records.leases(rows)

    def release(self, leases: Sequence[Lease], now: float | None = None) -> list[Lease]:
        if not leases:
            return []
        payload = json.dumps([{"id": x.job_id, "eid": x.execution_id} for x in leases])
        with self._write() as conn:
            params = {"leases": payload, "now": self._clock(conn, now)}
            landed = records.leases(self._run(conn, self.q.RELEASE, params))
        return [lease for lease in leases if lease not in landed]

    # -- reclaiming ----------------------------------------------------------------------
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
        t = self._time(conn, clock)
        docs, decided = reclaim.plan(rows, t, detected_by, reason, extra)
        landed = self._apply_finishes(conn, docs, clock)
        requeued = {row["queue"] for row, doc in zip(rows, docs, strict=True) if doc["keep"]}
        self._wake(conn, requeued)  # runnable now: idle workers need not wait for a poll
        return [r for r in decided if Lease(r.job_id, r.execution_id) in landed]

    def reap_expired(
        self,
        detected_by: str,
        limit: int = 100,
        now: float | None = None,
        observer: str | None = None,
    ) -> list[Reclaimed]:
        self.ensure_schema()
        with self._write() as conn:
            clock = self._clock(conn, now)
            contact, own_threshold = self._contact(conn, clock, observer)
            if contact < own_threshold:
                return []
            rows = conn.execute(self.q.SELECT_EXPIRED, {"now": clock, "limit": limit}).fetchall()
            return self._reclaim(
                conn, clock, rows, detected_by, "lease expired", reclaim.detector(observer)
            )

    def reclaim_worker(
        self, worker_id: str, detected_by: str, reason: str, now: float | None = None
    ) -> list[Reclaimed]:
        with self._write() as conn:
            clock = self._clock(conn, now)
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
        self.ensure_schema()
        with self._write() as conn:
            clock = self._clock(conn, now)
            contact, _ = self._contact(conn, clock, except_worker_id)  # judges silence
            params = {
                "name": name,
                "except_id": except_worker_id,
                "now": clock,
                "stale_after": stale_after,
                "contact": contact,
            }
            gone, alive, suspected = reclaim.sort_namesakes(
                self._run(conn, self.q.NAMESAKES, params), self._lock_free
            )
            self._note_locks(conn, clock, suspected, [n.id for n in alive])
            if not gone:
                return Reconciliation([], alive, suspected)
            ids = self._array(gone)
            rows = conn.execute(self.q.SELECT_NAME_JOBS, {"ids": ids}).fetchall()
            conn.execute(self.q.DEACTIVATE_NAMED, {"ids": ids, "now": clock})
            reason = f"worker restarted under the same name {name!r}"
            reclaimed = self._reclaim(conn, clock, rows, detected_by, reason)
        self._forget_workers(gone)
        return Reconciliation(reclaimed, alive, suspected)

    def crash_attempt(
        self, lease: Lease, crash: dict[str, Any], detected_by: str, now: float | None = None
    ) -> Reclaimed | None:
        params = {"job_id": lease.job_id, "execution_id": lease.execution_id}
        reason = str(crash.get("reason", "crashed"))
        extra = {k: v for k, v in crash.items() if k != "reason"}
        with self._write() as conn:
            clock = self._clock(conn, now)
            rows = conn.execute(self.q.SELECT_ONE_RUNNING, params).fetchall()
            done = self._reclaim(conn, clock, rows, detected_by, reason, extra)
        return done[0] if done else None

    # -- the worker registry -------------------------------------------------------------
    def register_worker(self, info: WorkerInfo, now: float | None = None) -> None:
        self.ensure_schema()
        with self._write() as conn:
            params = {
                "id": info.id,
                "name": info.name,
                "hostname": info.hostname,
                "pid": info.pid,
                "queues": json.dumps(list(info.queues)),
                "concurrency": info.concurrency,
                "stale_after": documents.worker_stale_after(info),
                "now": self._clock(conn, now),
            }
            conn.execute(self.q.REGISTER_WORKER, params)

    def stop_worker(self, worker_id: str, now: float | None = None) -> None:
        with self._write() as conn:
            params = {"worker_id": worker_id, "now": self._clock(conn, now)}
            conn.execute(self.q.STOP_WORKER, params)

    def mark_stale_workers(
        self,
        stale_after: float,
        detected_by: str,
        now: float | None = None,
        observer: str | None = None,
    ) -> list[StaleWorker]:
        self.ensure_schema()
        with self._write() as conn:
            clock = self._clock(conn, now)
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

    def _reclaim_dead(
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
        extra = reclaim.detector(observer)
        reclaimed = self._reclaim(conn, clock, rows, detected_by, reason, extra)
        return records.stale_worker(worker, reclaimed)

    def list_workers(self, include_all: bool = False) -> list[dict[str, Any]]:
        self.ensure_schema()
        with self._read() as conn:
            rows = conn.execute(self.q.LIST_WORKERS, {"include_all": include_all}).fetchall()
        return [serialize.worker_dict(r) for r in rows]

    def prune(
        self, worker_retention: float, job_retention: float, now: float | None = None
    ) -> PruneCounts:
        self.ensure_schema()
        with self._write() as conn:
            clock = self._clock(conn, now)
            params = {"now": clock, "retention": worker_retention}
            workers = conn.execute(self.q.PRUNE_WORKERS, params).rowcount
            params = {"now": clock, "retention": job_retention, "limit": PRUNE_BATCH}
            ids = [r["id"] for r in conn.execute(self.q.SELECT_PRUNABLE_JOBS, params)]
            self._delete_jobs(conn, ids)
        return PruneCounts(workers=workers, jobs=len(ids))
