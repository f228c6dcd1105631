"""The seam between the SQL store and a database: how statements run on a connection,
what a dialect provides, and the schema helpers every dialect migrates with.

Programs of statements are how a store operation is written once and run on any
connection (heartq's own, a caller's borrowed one, or a caller's asyncio one). An
operation that needs the rows of one statement to write the next (an enqueue that checks
dependencies, a finish that settles dependents) is a generator: it yields each `Step`
(a statement and its parameters), gets that statement's rows sent back, and returns its
answer (`Program`). `drive` and `drive_async` run one on a connection; the logic itself
never knows which connection it runs on.

A backend is a dialect object (`PostgresDialect`, `SQLiteDialect`) that the roles of
`store/sql/` hold, never a subclass that overrides them: a role's operation reads top to
bottom in its own module and asks the dialect where the database decides. Every member
of a dialect is a leaf: it answers (a transaction, a value, its own statement's rows)
and never calls back into `store/sql/`, whose modules a dialect's package does not
import but for this one and `statements.py` (tests/test_import_graph.py). What a
dialect provides (`Dialect`):

- `q`: its statements module, with the same names in both dialects (`CLAIM`,
  `HEARTBEAT`, `FINISH`, `RELEASE`, ...), so one can be diffed against the other. A
  statement is a string, or a tuple of strings run in order in the same transaction
  with the same parameters, the last one's rows being the answer (SQLite has no
  data-modifying CTE, so its `HEARTBEAT` is two statements where PostgreSQL has one).
- transactions: `write`, `read`, `write_each` (the hot one-statement writes: PostgreSQL
  commits each statement by itself, `statements_commit_alone`), `write_enqueue` (SQLite
  lets small enqueues share a commit), `write_renewal` (PostgreSQL's heartbeat rides the
  worker's lasting session), `own_transaction` (a keyed claim's, where its connection
  commits each statement by itself);
- the clock (`now`: the database's time as a number; `clock`: what its statements take
  as `now`), lists bound as one parameter (`array`), duplicate ids (`is_duplicate`);
- wake-ups and announcements (`wake_steps`, `announce_ended`, `announce_cancel`:
  PostgreSQL's NOTIFYs; SQLite has none, its workers and waiters poll);
- the few things that truly differ: the keys a keyed claim locks
  (`lock_concurrency_keys`, `lock_rate_keys`: PostgreSQL's many claimers lock them,
  SQLite's one writer locks none; what is claimed with them is `keyed.py`'s),
  `insert_and_wake` (PostgreSQL's one round trip), `lone_insert` (SQLite binds one job
  by value);
- the caller's connections (`borrow`, `borrow_async`, `task_scope`), and its schema
  migrated before first use (`ensure_schema`).

What is not SQL-shaped lives in the dialect package's own objects: its liveness locks
(`Liveness`: lock files, advisory locks on a lasting session; it finds the gone, the
reclaimer reclaims them) and its link (`Link` in `store/link.py`: the pool, the
lasting session and its LISTENs, the store's `close`). Why this cut: a dialect's author
reads this module to know what to write, a reader of an operation finds it in one role
module, and the dialect stays small because everything the two databases agree on is
written once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Protocol, TypeVar

from heartq.errors import ConfigError
from heartq.store.sql.statements import FairStatements, Statement, Statements

# -- programs of statements ----------------------------------------------------------------

"""A statement, or several run in order (the last one's rows are its rows)."""
Step = tuple[Statement, dict[str, Any]]
"""A statement with its parameters."""
Rows = list[Any]
T = TypeVar("T")
Program = Generator[Step, Rows, T]
"""Statements to run in order, each one's rows sent back: what the program returns is its
answer."""


def each(steps: Sequence[Step]) -> Program[None]:
    """Statements whose rows nobody reads, as a program (`yield from` a plain list would
    refuse the rows sent back)."""
    for step in steps:  # noqa: UP028 - `yield from` a list refuses what is sent
        yield step


def run(conn: Any, statement: Statement, params: Mapping[str, Any]) -> Rows:
    """Run a statement (or each of a tuple of them, in order); the last one's rows."""
    for text in statement if isinstance(statement, tuple) else (statement,):
        cursor = conn.execute(text, params)
    return cursor.fetchall() if cursor.description else []


def drive(conn: Any, program: Program[T]) -> T:
    """Run `program` on `conn`, each step's rows sent back to it; what it returns."""
    try:
        step = next(program)
        while True:
            step = program.send(run(conn, *step))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def drive_async(conn: Any, program: Program[T]) -> T:
    """`drive` on an asyncio connection (psycopg's `AsyncConnection`)."""
    try:
        step = next(program)
        while True:
            statement, params = step
            for text in statement if isinstance(statement, tuple) else (statement,):
                cursor = await conn.execute(text, params)
            rows: Rows = await cursor.fetchall() if cursor.description else []
            step = program.send(rows)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


Lane = tuple[str, int, str]
"""A lane of PostgreSQL's ready log: a queue, a priority and a fairness key ('' for the
jobs without one)."""


# -- what a dialect provides ---------------------------------------------------------------


class Dialect(Protocol):
    """One database's way of running the store's statements (see the module docstring)."""

    @property
    def q(self) -> Statements:
        """The dialect's statements module."""
        ...

    @property
    def statements_commit_alone(self) -> bool:
        """Whether `write_each` commits each statement by itself (PostgreSQL): then the
        worker's finish leaves jobs with dependents to a transaction that settles them."""
        ...

    def write(self) -> contextlib.AbstractContextManager[Any]:
        """A write transaction."""
        ...

    def read(self) -> contextlib.AbstractContextManager[Any]:
        """A read."""
        ...

    def write_each(self) -> contextlib.AbstractContextManager[Any]:
        """For the hot operations that are one statement (claim, finish, heartbeat): a
        connection on which each statement commits by itself where that saves round trips
        (PostgreSQL: no BEGIN and COMMIT). A step that needs more than one statement opens
        a transaction of its own."""
        ...

    def by_position(self, conn: Any) -> Any:
        """Where to run a hot statement whose rows are read by position (a claim's,
        `records.CLAIMED_COLUMNS`; a finish's): on `conn`, its rows tuples, not a dict
        each (PostgreSQL: a cursor of `conn` with psycopg's tuple rows; SQLite: `conn`
        itself, whose `sqlite3.Row`s read by position as well)."""
        ...

    def write_enqueue(self, jobs: int) -> contextlib.AbstractContextManager[Any]:
        """For an enqueue of `jobs` jobs: one transaction, which the dialect may let small
        enqueues share with other writes where that saves commits (SQLite: one fsync)."""
        ...

    def write_renewal(self) -> contextlib.AbstractContextManager[Any]:
        """For the worker's heartbeat: a connection that does not queue behind the
        worker's other statements where the dialect has one."""
        ...

    def now(self, conn: Any, now: float | None) -> float:
        """The database's time as a number (`now` if given)."""
        ...

    def clock(self, conn: Any, now: float | None) -> float | None:
        """What the statements take as `now` (SQLite: the time read once, so every
        statement of the transaction agrees; PostgreSQL: `now` as given, None meaning the
        transaction's `now()`)."""
        ...

    def vacuum_jobs(self, since: float) -> bool:
        """Make the jobs table's dead row versions reusable now, unless it was vacuumed
        within `since` seconds; True if this vacuumed it. PostgreSQL: a light vacuum
        (`queries/admin.py`, `VACUUM_JOBS`, when `VACUUM_DUE`); SQLite: nothing to do
        (False): it reuses the pages a delete or an update frees within its file and
        keeps no dead row versions (one writer, no MVCC horizon)."""
        ...

    def prune_lanes(self, idle: float) -> int:
        """Delete the lanes of the ready log no claim took from for `idle` seconds and that
        have nothing left, in a transaction of their own; the number deleted. PostgreSQL:
        `IDLE_LANES`, then `DELETE_EMPTY_LANES` (`queries/admin.py`); SQLite: none (0)."""
        ...

    def prune_claim_marks(self, conn: Any, clock: float | None) -> int:
        """Delete the claim marks a further one supersedes, a minute after they were made;
        the number deleted. PostgreSQL: `PRUNE_CLAIM_MARKS` (`queries/admin.py`); SQLite:
        its claim needs no frontier (one writer at a time); what it deletes are the fair
        shares' finishes their tier's clock has passed (`store/sql/fair.py`), which say
        nothing any more."""
        ...

    def array(self, values: Sequence[str]) -> Any:
        """A list of ids bound as one parameter (SQLite: JSON text; PostgreSQL: text[])."""
        ...

    def batch(self, name: str, docs: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """A batch statement's documents (`heartq.store.documents`) as its parameters,
        `name` the batch it reads (`finishes`, `leases`, `renewals`, `reports`, `jobs`).
        SQLite: the documents as one JSON text; PostgreSQL: one typed array per field
        (`postgres/queries/batches.py`)."""
        ...

    def is_duplicate(self, exc: Exception) -> bool:
        """Whether an error is a duplicate job id."""
        ...

    def wake_steps(self, queues: Iterable[str]) -> list[Step]:
        """The statements that tell idle workers jobs are runnable in `queues` (none: nobody
        hears)."""
        ...

    def due_steps(self, seconds: float) -> list[Step]:
        """The statements that tell idle workers a delayed job falls due in `seconds`, so
        they wake then rather than at their next poll (none: nobody hears)."""
        ...

    def announce_ended(self, conn: Any, job_ids: Sequence[str]) -> None:
        """Tell waiters (`App.result`) that these jobs ended (or nobody: they poll)."""
        ...

    def announce_cancel(self, conn: Any, worker_ids: Sequence[str]) -> None:
        """Tell the workers running these jobs that a cancel was requested, with the
        requesting commit (or nobody: each worker's pulse reads its cancels)."""
        ...

    def lone_insert(self, doc: dict[str, Any], clock: float | None) -> Step | None:
        """The statement that inserts one job bound by value, where it is cheaper than the
        batch statement's JSON; None: the batch statement."""
        ...

    def lane_steps(self, lanes: Sequence[Lane]) -> list[Step]:
        """An enqueue into the caller's transaction, before its jobs: the statements that
        hold the ready log's `lanes` (queue, priority) its jobs enter until the caller's
        transaction ends, so that none is pruned meanwhile (PostgreSQL: `ENTER_LANES`);
        SQLite: none (no ready log)."""
        ...

    def open_lanes(self, lanes: Sequence[Lane]) -> None:
        """...then make the new ones, committed at once on a connection of heartq's own
        that never waits on the pool (PostgreSQL: `OPEN_LANES`, on `ConnectionPool.aside`):
        so the enqueue's insert makes no lane (`INSERT_ENTERED_JOBS`), and no other
        enqueuer of a new lane waits for the caller's commit; SQLite: nothing."""
        ...

    def insert_and_wake(self, docs: list[dict[str, Any]], now: float | None) -> bool:
        """Store jobs that need nothing but an insert (no unique key, no eta) and wake their
        queues in one statement that commits by itself, where the dialect has one. False,
        having done nothing: the caller opens a transaction."""
        ...

    def own_transaction(self, conn: Any) -> contextlib.AbstractContextManager[Any] | None:
        """A transaction of its own on `conn`, for statements whose transaction locks must
        last until they all commit (a keyed claim's keys), where `conn` commits each
        statement by itself (PostgreSQL's `write_each`: the statements run before on it
        are committed already); None where `conn` is in a transaction (SQLite;
        PostgreSQL behind a transaction-mode pooler)."""
        ...

    def lock_concurrency_keys(self, conn: Any, params: dict[str, Any]) -> list[str] | None:
        """The concurrency keys of runnable jobs this claim may take, each locked for the
        transaction (at most `params["limit"]`; a key another claimer holds is skipped):
        the keys `CLAIM_KEYED` then claims. None: nothing to lock, one writer at a time
        (SQLite: `CLAIM_KEYED` takes every key)."""
        ...

    @property
    def fair(self) -> FairStatements | None:
        """The statements of a claim by fair shares decided here (`store/sql/fair.py`:
        SQLite, whose one writer tags, reads and writes in one transaction), or None
        where the claim statement takes the keys in turn itself (PostgreSQL: its ready
        log's lanes, `queries/ready_log.py`)."""
        ...

    def lock_rate_keys(self, conn: Any, params: dict[str, Any]) -> LockedRateKeys | None:
        """The rate keys with room this claim may take, and the concurrency keys of their
        jobs, each locked for the transaction, as `CLAIM_RATED` takes them. None: nothing
        to lock, one writer at a time (SQLite: `CLAIM_RATED` takes every key)."""
        ...

    def borrow(self, connection: Any) -> contextlib.AbstractContextManager[Any]:
        """The caller's connection, inside its open transaction, made ready for heartq's
        statements and put back as it was afterwards. `ConfigError` for one this backend
        cannot use."""
        ...

    def borrow_async(self, connection: Any) -> contextlib.AbstractAsyncContextManager[Any]:
        """`borrow` for an asyncio connection (`ConfigError` where the backend has none)."""
        ...

    def task_scope(self, conn: Any) -> contextlib.AbstractContextManager[Any]:
        """Inside `completing`: heartq's write connection as the task writes its effects
        on it, with the database's own defaults for the task's names."""
        ...

    def ensure_schema(self) -> None:
        """Bring the schema up to date once per store, before its first use (the backend's
        `Link.migrate` does it on demand)."""
        ...


@dataclass(frozen=True)
class LockedRateKeys:
    """What `Dialect.lock_rate_keys` locked for a claim's transaction: the rate keys with
    room, the concurrency keys of their first jobs, whether a key with room was held by
    another claimer (`contended`: ask again soon) and whether any rate-limited job is
    runnable here at all (`held`: only then is `RATE_WAIT` asked)."""

    rate: list[str]
    concurrency: list[str]
    contended: bool
    held: bool


@dataclass(frozen=True)
class FoundGone:
    """The workers a liveness probe found gone, in the write transaction that found them:
    their jobs are reclaimed in it (`ReclaimOps.liveness_probe`)."""

    conn: Any
    clock: float | None
    worker_ids: list[str]


class Liveness(Protocol):
    """A dialect's liveness locks as the reclaimer asks them: held by each live worker
    (through the store's `Link.liveness_hold`), free once its process is gone (a lock
    file the kernel frees; a session advisory lock the server frees)."""

    grace: float
    """Seconds a lock must stay free before a probe believes the worker gone."""

    def gone(self, now: float | None = None) -> contextlib.AbstractContextManager[FoundGone | None]:
        """The active workers whose lock is free (for `grace`), in a write transaction
        that the reclaim of their jobs runs in before it commits; None: no probe now."""
        ...

    def suspects(self) -> dict[str, float]: ...

    def free(self, worker_ids: Sequence[str]) -> list[str]: ...

    def lock_free(self, namesake: Mapping[str, Any]) -> bool | None:
        """Whether a namesake's lock is free (from its `NAMESAKES` row); None: free, but
        not yet for `grace`."""
        ...

    def note_locks(
        self, conn: Any, clock: float | None, free: Sequence[str], held: Sequence[str]
    ) -> None:
        """Note which namesakes' locks were found free (suspected) and which held."""
        ...

    def forget(self, worker_ids: Sequence[str]) -> None:
        """Clean up after workers found gone and reclaimed."""
        ...


def wake(dialect: Dialect, conn: Any, queues: Iterable[str]) -> None:
    """Tell idle workers that jobs are runnable in `queues`, in `conn`'s transaction."""
    for statement, params in dialect.wake_steps(queues):
        run(conn, statement, params)


def database_time(dialect: Dialect, conn: Any, clock: float | None) -> float:
    """The transaction's time as a number, from what `Dialect.clock` gave."""
    return clock if clock is not None else dialect.now(conn, None)


def current_time(dialect: Dialect) -> float:
    """The database's current time, read in a transaction of its own (`Store.clock`)."""
    with dialect.read() as conn:
        return dialect.now(conn, None)


def deployment_id(dialect: Dialect) -> str:
    """The id the schema's first migration made for this database (`Link.deployment_id`)."""
    dialect.ensure_schema()
    with dialect.read() as conn:
        row = conn.execute(dialect.q.DEPLOYMENT_ID).fetchone()
    return str(row["id"])


def no_async_connection(dialect: str, connection: Any) -> ConfigError:
    """The refusal of a dialect that takes no asyncio connection."""
    return ConfigError(
        f"{dialect} takes no asyncio connection "
        f"({type(connection).__name__}): pass its connection to enqueue() instead"
    )


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


def refused(version: int, why: str) -> ConfigError:
    """The error of a migration that refuses what the queue holds (it changed nothing:
    each migration runs in the transaction that records it)."""
    return ConfigError(f"the queue's schema cannot be migrated to v{version}: {why}")


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
            " it; run that version here too (docs/UPGRADING.md)"
        )


def schema_version(applied: set[int]) -> int:
    """The version a schema reports: its newest applied migration (0: none)."""
    return max(applied, default=0)
