"""Putting work in: enqueues (in heartq's own transaction or in the caller's), periodic
schedules, and task declarations with the re-routing of the waiting jobs they change.

Why together: each writes new jobs, or decides where waiting jobs go, through the same
steps and nothing else in the store uses them: `_store_jobs` stores job documents (a
program of statements: jobs with dependencies through `dependencies.py`, the unique ones
answered by the job that holds their key), `_delay_until_eta` turns an eta into a delay
by the database's clock, `wake` tells idle workers. A schedule's tick is an enqueue under
the schedule's locked row; a declaration changes what an enqueue by name gets, and
`reroute_jobs` applies it to the jobs already waiting. `task_policies` is a read, here
because its caller is the enqueuer (`App` looks a task up before it enqueues); `get_job`
reads the declarations through `read_policies` too.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from heartq import policy
from heartq.errors import DuplicateJob
from heartq.model import NewJob, TaskPolicy, TickPlan
from heartq.payload import MAX_DURATION
from heartq.store import documents, records
from heartq.store.sql import dependencies, fair
from heartq.store.sql.base import (
    Dialect,
    Lane,
    Program,
    Step,
    database_time,
    drive,
    drive_async,
    each,
    run,
    wake,
)


class EnqueueOps:
    """The enqueuer's operations of `SqlStore` (`Enqueuer` in `store/interface.py`, and
    the declarations `Store` adds to it)."""

    def __init__(self, dialect: Dialect) -> None:
        self.d = dialect
        self.q = dialect.q

    def enqueue(
        self, jobs: Sequence[NewJob], now: float | None = None, connection: Any = None
    ) -> list[str]:
        docs = [documents.new_job_doc(job) for job in jobs]
        if not docs:
            return []
        self.d.ensure_schema()
        if connection is not None:
            with self.d.borrow(connection) as conn:
                dated = drive(conn, self._enter(docs, now))
                self.d.open_lanes(ready_lanes(docs))
                return drive(conn, self._enqueue_steps(docs, dated))
        try:
            if self.d.insert_and_wake(docs, now):
                return [str(d["id"]) for d in docs]
            with self.d.write_enqueue(len(docs)) as conn:
                clock = self.d.clock(conn, now)
                self._delay_until_eta(conn, docs, clock)
                ids = drive(conn, self._store_jobs(docs, clock))
                for statement, params in self._wake_steps(docs):
                    run(conn, statement, params)
        except Exception as exc:
            if self.d.is_duplicate(exc):
                raise DuplicateJob(f"a job with one of these ids already exists: {exc}") from None
            raise
        return ids

    async def enqueue_async(self, jobs: Sequence[NewJob], connection: Any) -> list[str]:
        # Imported here, on the event loop that runs this, where asyncio is loaded already:
        # a process that never enqueues from asyncio code (a command) does not pay for it.
        import asyncio

        docs = [documents.new_job_doc(job) for job in jobs]
        if not docs:
            return []
        await asyncio.to_thread(self.d.ensure_schema)
        async with self.d.borrow_async(connection) as conn:
            clock = await drive_async(conn, self._enter(docs, None))
            await asyncio.to_thread(self.d.open_lanes, ready_lanes(docs))
            return await drive_async(conn, self._enqueue_steps(docs, clock))

    def _store_jobs(
        self, docs: list[dict[str, Any]], clock: float | None, entered: bool = False
    ) -> Program[list[str]]:
        """The statements that store `docs`, and each job's id as the caller gets it. Jobs
        without a unique key or dependencies in one batch; jobs with dependencies, or that
        others of the batch depend on, as `dependencies.store` writes them (after it has
        locked and checked the dependencies outside the batch); then one step per job with
        a unique key, whose answer is the job holding the key (that one, or the one already
        there): so a key met twice in one batch makes one job too. Last, where the claim
        by fair shares is decided in `fair.py` (SQLite), the new jobs that take turns are
        given their tags, so a flood enqueued first holds no later key back."""
        waited = dependencies.waited_for(docs)
        linked = {str(d["id"]) for d in docs if dependencies.is_linked(d, waited)}
        plain = [d for d in docs if d["unique_key"] is None and d["id"] not in linked]
        insert = self._insert_steps(plain, clock, entered) if plain else []
        if linked:
            yield from dependencies.store(self.q, docs, self.d.array, clock, insert, waited)
        else:
            yield from each(insert)
        for doc in docs:
            if doc["unique_key"] is not None:
                rows = yield (self.q.ENQUEUE_UNIQUE, dict(doc, now=clock))
                doc["id"] = rows[0]["id"]  # the new job's, or the one found
        turns = [d for d in docs if fair.takes_turns(d)]
        if turns and self.d.fair is not None:  # SQLite: their places in line, now
            queues = self.d.array(sorted({str(d["queue"]) for d in turns}))
            yield from fair.tagging(self.d.fair, queues, clock, len(turns))
        return [str(d["id"]) for d in docs]

    def _insert_steps(
        self, docs: list[dict[str, Any]], clock: float | None, entered: bool
    ) -> list[Step]:
        """The statements that insert jobs without a unique key or dependencies: the whole
        batch as the dialect binds a batch (`Dialect.batch`), or a lone job as the dialect
        binds it by value where that is cheaper (`Dialect.lone_insert`). `entered`: in a
        caller's transaction, whose lanes `_enter` held and `Dialect.open_lanes` made."""
        lone = self.d.lone_insert(docs[0], clock) if len(docs) == 1 else None
        if lone is not None:
            return [lone]
        insert = self.q.INSERT_ENTERED_JOBS if entered else self.q.INSERT_JOBS
        return [(insert, {**self.d.batch("jobs", docs), "now": clock})]

    def _enter(self, docs: list[dict[str, Any]], now: float | None) -> Program[float]:
        """The start of an enqueue into the caller's transaction: the time its jobs date
        from, read on the caller's connection as the database's current time (the
        caller's transaction may be old, and its `now()` with it; a connection of
        heartq's own would have to be free: a task enqueuing in its `ctx.transaction()`
        holds one), its etas turned into delays by it; then the lanes its jobs enter the
        ready log by, held until the caller's transaction ends (`Dialect.lane_steps`)."""
        if now is None:
            rows = yield (self.q.WALL_CLOCK, {})
            now = float(rows[0]["now"])
        self._delay_until_eta(None, docs, now)
        yield from each(self.d.lane_steps(ready_lanes(docs)))
        return now

    def _enqueue_steps(
        self, docs: list[dict[str, Any]], clock: float
    ) -> Program[list[str]]:
        """An enqueue into the caller's transaction, as statements: the wake-ups first (a
        NOTIFY is delivered by the caller's commit, and only by it), then the jobs."""
        yield from each(self._wake_steps(docs))
        return (yield from self._store_jobs(docs, clock, entered=True))

    def _wake_steps(self, docs: list[dict[str, Any]]) -> list[Step]:
        """What tells idle workers of these jobs (their etas already delays): the queues
        of those runnable now (or waiting for others, settled by their end), and when
        the soonest delayed one falls due."""
        queues = {str(d["queue"]) for d in docs if d["delay"] <= 0 or "depends_on" in d}
        delays = [float(d["delay"]) for d in docs if d["delay"] > 0 and "depends_on" not in d]
        steps = self.d.wake_steps(queues) if queues else []
        return steps + (self.d.due_steps(min(delays)) if delays else [])

    def _delay_until_eta(self, conn: Any, docs: list[dict[str, Any]], clock: float | None) -> None:
        """A job given an `eta` waits from now until then, by the database's clock (an eta
        already past means now: it does not jump ahead of jobs that waited)."""
        if any(doc["run_at"] is not None for doc in docs):
            t = database_time(self.d, conn, clock)
            for doc in docs:
                if doc["run_at"] is not None:
                    doc["delay"] = min(MAX_DURATION, max(0.0, doc["run_at"] - t))

    # -- periodic schedules --------------------------------------------------------------
    def list_schedules(self, last_jobs: bool = True) -> list[dict[str, Any]]:
        self.d.ensure_schema()
        statement = self.q.LIST_SCHEDULES if last_jobs else self.q.SCHEDULE_DEFINITIONS
        with self.d.read() as conn:
            rows = conn.execute(statement).fetchall()
        return [_schedule_row(row) for row in rows]

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
        self.d.ensure_schema()
        with self.d.write() as conn:
            clock = self.d.clock(conn, now)
            params: dict[str, Any] = {"name": name, "task": task, "spec": spec, "now": clock}
            if not runtime:  # a code schedule's row is made at its first tick
                conn.execute(self.q.ENSURE_SCHEDULE, params)
            row = conn.execute(self.q.LOCK_SCHEDULE, params).fetchone()
            if row is None or bool(row["paused"]) != paused or (runtime and not row["runtime"]):
                return []  # removed, paused or resumed, or taken by code meanwhile
            last = None if row["last_tick"] is None else float(row["last_tick"])
            due = plan(last, database_time(self.d, conn, clock))
            docs = [documents.new_job_doc(job) for job in make_jobs(due.ticks)]
            ids = drive(conn, self._store_jobs(docs, clock))
            params.update(
                last_tick=due.last_tick,
                next_tick=due.next_tick,
                last_job_id=ids[-1] if ids else None,
                by=by,
                runtime=runtime,  # a code schedule's tick drops a runtime definition
            )
            conn.execute(self.q.UPDATE_SCHEDULE, params)
            if docs:
                wake(self.d, conn, {str(d["queue"]) for d in docs})
        return ids

    # -- task declarations ---------------------------------------------------------------
    def read_policies(self, conn: Any, names: Sequence[str] | None) -> dict[str, TaskPolicy]:
        """The declared tasks among `names` (all when None), in the caller's transaction."""
        params = {"all": names is None, "names": self.d.array(list(names or []))}
        rows = conn.execute(self.q.TASK_POLICIES, params).fetchall()
        return {row["name"]: records.task_policy(row) for row in rows}

    def task_policies(self, names: Sequence[str] | None = None) -> dict[str, TaskPolicy]:
        self.d.ensure_schema()
        with self.d.read() as conn:
            return self.read_policies(conn, names)

    def declare_tasks(
        self, policies: Sequence[TaskPolicy], worker_id: str, now: float | None = None
    ) -> list[str]:
        if not policies:
            return []
        self.d.ensure_schema()
        docs = [documents.task_doc(p) for p in policies]
        with self.d.write() as conn:
            before = self.read_policies(conn, [p.name for p in policies])
            params = {"tasks": json.dumps(docs), "worker_id": worker_id}
            conn.execute(self.q.DECLARE_TASKS, dict(params, now=self.d.clock(conn, now)))
        return [p.name for p in policies if not policy.same(before.get(p.name), p)]

    def reroute_jobs(
        self, names: Sequence[str], now: float | None = None, job_ids: Sequence[str] | None = None
    ) -> int:
        if not names:
            return 0
        self.d.ensure_schema()
        with self.d.write() as conn:
            params = {
                "names": self.d.array(list(names)),
                "all": job_ids is None,
                "ids": self.d.array(list(job_ids or [])),
                "now": self.d.clock(conn, now),
                **policy.BIT_PARAMS,
            }
            rows = run(conn, self.q.REROUTE_JOBS, params)
            wake(self.d, conn, {r["queue"] for r in rows})
        return len(rows)


def _schedule_row(row: Any) -> dict[str, Any]:
    """A row of `list_schedules`: the definition as an object (SQLite stores its text)."""
    found = dict(row)
    if isinstance(found["definition"], str):
        found["definition"] = json.loads(found["definition"])
    found["paused"] = bool(found["paused"])
    return found


def ready_lanes(docs: Sequence[dict[str, Any]]) -> list[Lane]:
    """The lanes (queue, priority, fairness key) of the ready log that jobs enter: those
    runnable now and without a concurrency or a rate key (the dialects' `_READY`), in one
    order."""
    return sorted({
        (str(d["queue"]), int(d["priority"]), str(d["fair_key"] or ""))
        for d in docs
        if documents.runnable_unlimited(d)
    })  # fmt: skip
