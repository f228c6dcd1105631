"""The SQL store's foundation: the dialect hooks, and the plumbing every role uses.

A backend is a dialect: its connections, its statements, and a few hooks where it truly
needs something else. What a dialect provides (`SQLiteStore` and `PostgresStore` are the
two):

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
- hooks with a default: `_wake` (PostgreSQL NOTIFYs idle workers), `_insert_steps`
  (SQLite binds a lone job by value, cheaper than parsing JSON for one row), `_claim_with`
  (how a claim statement runs), `_claim_rows`
  (PostgreSQL walks one queue's index its own way), `_claim_limited` (PostgreSQL locks
  the concurrency and rate keys it claims), `_lock_free` and `_forget_workers` (how a
  namesake's liveness lock is judged, and cleaned up).
- `migrate`, `close`, `liveness_hold`, `liveness_probe`, `liveness_suspects`, `listen`.

Why this cut: every hook a dialect may override is declared here, whichever role calls
it, so a dialect's author reads one module to know what to write, and the roles never
declare hooks of their own. With them, what every role uses: transactions, the clock,
binding lists, running statements (and driving `dependencies.py`'s programs of them),
waking idle workers, the schema, and the operations more than one role runs:
`_apply_finishes` (the fenced finish of `finish`, of a completion and of every reclaimer,
with the release of the ended jobs' dependents), `_release_dependents` (also after a
release and a cancel) and `_task_policies` (the declarations an enqueuer reads and
`get_job` shows).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib import resources
from types import ModuleType
from typing import Any, TypeVar

from heartq.errors import ConfigError
from heartq.model import Lease, LivenessChange, TaskPolicy
from heartq.store import records
from heartq.store.interface import LivenessHandle
from heartq.store.sql import dependencies, program
from heartq.store.sql.program import Rows, Step

RATE_CONTENDED_RETRY = 0.05
"""Seconds after which a claimer that found a rate key with room held by another claimer
asks again: that claim commits within milliseconds, and the next look sees what it took
(and then the exact wait, or the room left)."""

T = TypeVar("T")


def migration_scripts(package: str) -> list[tuple[int, str]]:
    """A dialect's migrations (`<package>/migrations/NNNN_name.sql`), oldest first."""
    folder = resources.files(package) / "migrations"
    found = [
        (int(entry.name.split("_", 1)[0]), entry.read_text("utf-8"))
        for entry in folder.iterdir()
        if entry.name.endswith(".sql")
    ]
    return sorted(found)


def missing_migrations(
    scripts: Sequence[tuple[int, str]], applied: set[int]
) -> list[tuple[int, str]]:
    """The scripts not yet recorded as applied, oldest first. Every unrecorded version
    runs, not only those above the newest recorded one: a database that took a later
    migration first (two branches merged in either order) still gets the earlier one."""
    return [(version, script) for version, script in scripts if version not in applied]


def refuse_unknown_versions(scripts: Sequence[tuple[int, str]], applied: set[int]) -> None:
    """Refuse a schema that a newer heartq migrated: its statements would run against
    tables it does not know (since schema v17 an older worker's claim inserts into what
    is now a view), so this heartq stops at its first call with one clear line instead
    of failing statement by statement."""
    known = {version for version, _ in scripts}
    unknown = sorted(applied - known)
    if unknown:
        raise ConfigError(
            f"the queue's schema has migration {', '.join(map(str, unknown))}, which this"
            f" heartq (schema {max(known, default=0)}) does not know: a newer heartq migrated"
            " it; run that version here too (docs/OPERATIONS.md, upgrading)"
        )


def schema_version(applied: set[int]) -> int:
    """The version a schema reports: its newest applied migration (0: none)."""
    return max(applied, default=0)


class SqlBase:
    """What every role of `SqlStore` stands on. See the module docstring for what a
    dialect provides; `SqlStore` (`store.py`) composes the roles over it."""

    q: ModuleType
    url: str
    supports_notify: bool = False
    liveness_grace: float = 0.0
    holds_liveness_lock: bool = True
    """Whether the workers of this store hold a liveness lock (recorded with each worker:
    False behind a transaction-mode pooler without a direct URL, whose workers have no
    session to hold one and are judged by heartbeats and leases alone)."""
    _migrated: bool = False
    _statements_commit_alone: bool = False
    """Whether `_write_each` runs each statement as a transaction of its own (PostgreSQL):
    then the worker's finish leaves jobs with dependents to a transaction that releases
    them (`_finish_statement`)."""

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

    def _write_enqueue(self, jobs: int) -> contextlib.AbstractContextManager[Any]:
        """For an enqueue of `jobs` jobs: one transaction, which the dialect may let small
        enqueues of concurrent threads share with other writes where that saves commits
        (SQLite: one fsync for several). Default: `_write()`."""
        return self._write()

    def _write_renewal(self) -> contextlib.AbstractContextManager[Any]:
        """For the worker's heartbeat, the statement that tells the fleet it lives: a
        connection that does not queue behind the worker's other statements where the
        dialect has one (PostgreSQL: the worker's lasting session). Default:
        `_write_each()`."""
        return self._write_each()

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

    def _announce_cancel(self, conn: Any, worker_ids: Sequence[str]) -> None:
        """Tell the workers running these jobs that a cancel was requested, with the
        requesting transaction's commit (default: nobody hears; each worker's pulse reads
        its cancels every tick)."""

    def _insert_steps(self, docs: list[dict[str, Any]], clock: float | None) -> list[Step]:
        """The statements that insert new jobs (default: the whole batch as one JSON
        parameter)."""
        return [(self.q.INSERT_JOBS, {"jobs": json.dumps(docs), "now": clock})]

    def _insert_and_wake(self, docs: list[dict[str, Any]], now: float | None) -> bool:
        """Store jobs that need nothing but an insert (no unique key, no eta) and wake
        their queues in one statement that commits by itself, where the dialect has one
        (PostgreSQL: one round trip instead of four). False, having done nothing: the
        dialect has none, or these jobs need more; the caller then opens a transaction.
        Default: none."""
        return False

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

    def _claim_with(self, conn: Any, statement: str, params: dict[str, Any]) -> Rows:
        """A claim statement's claimed rows. No execution row is written at a claim: the
        running attempt lives on the job row, and its execution row is written when it
        ends (FINISH, RELEASE)."""
        return self._run(conn, statement, params)

    def _claim_rows(self, conn: Any, params: dict[str, Any]) -> Rows:
        """The claimed rows of jobs with neither a concurrency nor a rate key."""
        return self._claim_with(conn, self.q.CLAIM, params)

    def _claim_by_ids(self, conn: Any, params: dict[str, Any]) -> Rows:
        """The jobs `params["ids"]` names that are queued and runnable, claimed."""
        return self._claim_with(conn, self.q.CLAIM_IDS, params)

    def _claim_limited(self, conn: Any, params: dict[str, Any]) -> tuple[Rows, float | None]:
        """Claimed jobs with a concurrency key (never more of a key running than its
        limit), then, slots left, with a rate key (never more of a key's starts in its
        period than its limit); and the seconds until a runnable
        rate-limited job held back may start (None: none is). `params["claimed"]`: how
        many jobs without a key this claim took already. Default: one writer at a time
        (SQLite), so nothing to lock: the statements in the claim's transaction.
        PostgreSQL, with many claimers at once, locks the keys first, in a transaction of
        its own."""
        rows = self._claim_with(conn, self.q.CLAIM_KEYED, params)
        return self._claim_rated(conn, params, rows)

    def _claim_rated(
        self,
        conn: Any,
        params: dict[str, Any],
        rows: Rows,
        *,
        keys: Mapping[str, Sequence[str]] | None = None,
        contended: bool = False,
        held: bool = True,
    ) -> tuple[Rows, float | None]:
        """`rows` (what the claim took of jobs with a concurrency key) and the jobs with
        a rate key that fill the slots left (`CLAIM_RATED`), and the rate wait: how long
        until a rate-limited job held back may start (`RATE_WAIT`, read only when slots
        are still free and, `held`, such jobs are runnable at all). `keys`: the rate keys
        and concurrency keys this claimer locked (None: no locks needed, every key goes).
        `contended`: a key with room was held by another claimer: ask again soon."""
        left = params["limit"] - len(rows)
        rate_keys = None if keys is None else list(keys["rate"])
        if left > 0 and rate_keys != []:
            given = dict(params, limit=left)
            if keys is not None:
                given.update(rate_keys=rate_keys, concurrency_keys=list(keys["concurrency"]))
            rows = rows + self._claim_with(conn, self.q.CLAIM_RATED, given)
        wait = None
        if held and len(rows) < params["limit"]:
            found = conn.execute(self.q.RATE_WAIT, params).fetchone()
            wait = None if found is None or found["wait"] is None else float(found["wait"])
        if contended:
            wait = RATE_CONTENDED_RETRY if wait is None else min(wait, RATE_CONTENDED_RETRY)
        return rows, wait

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

    _run = staticmethod(program.run)
    _drive = staticmethod(program.drive)

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

    def deployment_id(self) -> str:
        self.ensure_schema()
        with self._read() as conn:
            row = conn.execute(self.q.DEPLOYMENT_ID).fetchone()
        return str(row["id"])

    # -- shared by roles -----------------------------------------------------------------
    def _apply_finishes(
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
        landed, _ = self._finish_statement(conn, json.dumps(docs), clock, False, worker_id)
        return landed

    def _finish_statement(
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
        rows = self._run(conn, self.q.FINISH, params)
        landed = [r for r in rows if not r["deferred"]]
        self._announce_ended(conn, records.awaited_ends(landed))
        self._release_dependents(conn, dependencies.ended_with_dependents(landed), clock)
        return records.leases(landed), records.leases(r for r in rows if r["deferred"])

    def _release_dependents(self, conn: Any, ended: list[str], clock: float | None) -> None:
        """Release the waiting dependents of jobs that just ended in this transaction
        (`dependencies.release`), wake the queues that got runnable jobs and announce the
        awaited jobs it cancelled. Nothing at all when none of them has dependents."""
        if ended:
            done = self._drive(conn, dependencies.release(self.q, ended, self._array, clock))
            self._announce_ended(conn, done.awaited_ends)
            self._wake(conn, done.queues)

    def _task_policies(self, conn: Any, names: Sequence[str] | None) -> dict[str, TaskPolicy]:
        params = {"all": names is None, "names": self._array(list(names or []))}
        rows = conn.execute(self.q.TASK_POLICIES, params).fetchall()
        return {row["name"]: records.task_policy(row) for row in rows}
