"""PostgreSQL connections: URL handling, a pool, and errors turned into clear ones.

`postgresql://user:pass@host:5432/db?schema=NAME&pool_size=N&pooler=transaction&direct_url=U`
(`postgres://` too). `schema` (default `heartq`), `pool_size` (see `resolve_pool_size`),
`pooler` and `direct_url` (`pooler.py`) and `claim_commit` (`claim_commit.py`) are
heartq's own; every other query parameter goes to libpq as is. Each connection runs with
`search_path` set to that schema, so the SQL names tables plainly: a startup option, or
behind a transaction-mode pooler the first statement of each transaction (`pooler.py`).
JSON columns come back as text, exactly as stored, as in the SQLite backend.

The first use of a pool makes one connection attempt of its own
(`ConnectionPool.reach`), so a refusal that waiting cannot fix (a wrong password, no such
database: `refusals.py`) is `StoreRefused` at once instead of a `StoreUnavailable` after
the connect timeout.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import threading
import time
import weakref
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
import psycopg_pool
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from psycopg_pool import PoolTimeout

from heartq.errors import ConfigError, PayloadError, StoreRefused, StoreUnavailable
from heartq.store.postgres import checkout, claim_commit
from heartq.store.postgres import queries as q
from heartq.store.postgres.adapters import register_loaders
from heartq.store.postgres.checkout import Checkouts
from heartq.store.postgres.pooler import Pooler, resolve_pooler
from heartq.store.postgres.refusals import (
    POOLER_HINT,
    options_dropped,
    pooler_hint,
    refused_for_good,
)
from heartq.store.postgres.statements import NamedCursor
from heartq.store.redaction import redact

DEFAULT_SCHEMA = "heartq"
"""Defaults to a schema named `heartq`."""
DEFAULT_POOL_SIZE = 2
"""Defaults to at most 2 pooled connections per process (`pool_size`). With the one
session a worker keeps for its life (liveness lock and LISTEN, `session.py`) that is at
most 3 connections per worker whatever its concurrency, so 40 workers fit in PostgreSQL's
default `max_connections` (100) most of the time: a pool grows to its second connection
only while two of the worker's threads need one at once. heartq's transactions last
milliseconds (a claim, a finish, a heartbeat are one statement each), so two connections
serve a worker at concurrency 25; a thread that finds both busy waits for one."""
POOL_MAX_IDLE = 5.0
"""Seconds a pooled connection beyond the first may stay unused before the pool closes
it (psycopg_pool's `max_idle`, 10 minutes by default). A worker's threads meet at the
pool now and then (at startup they all do), and the pool grows to its second connection
for that moment; held for 10 minutes, those second connections filled the server, and
of 40 workers started together against `max_connections = 100` eleven waited for a
connection that never came. Closed after 5 idle seconds, an idle worker holds 2."""
ENV_POOL_SIZE = "HEARTQ_POOL_SIZE"
"""The environment variable that sets the pool size when neither the argument nor the
URL does."""
IDLE_IN_TRANSACTION_TIMEOUT_MS = 10_000
"""Defaults to 10 s: the server ends a session that sits inside an open transaction that
long. heartq's transactions last milliseconds; a client frozen mid-transaction (SIGSTOP,
a VM pause, a partition) would otherwise keep its jobs' rows locked, and no lease reclaimer could
reclaim them until it woke."""
CONNECT_TIMEOUT = 5.0
POOL_RECONNECT_WINDOW = 2.0
"""Defaults to 2 s: how long the pool keeps retrying one lost connection by itself
(psycopg_pool's `reconnect_timeout`, 5 minutes by default) before it gives up, and the
next caller that finds the pool empty starts a new attempt at once. psycopg_pool doubles
its delay after each failed attempt (1, 2, 4, 8 ... s, uncapped), so after an outage of
T seconds (a failover, a restart) its next attempt came up to T seconds after the server
was back: 2.5 s after a 4 s failover here, up to ~30 s after a 30 s one. Bounded so, a
worker finds the new primary within about a second of its promotion, whatever the
outage lasted (`tests/integration/test_failover.py`)."""
ASIDE_WAIT = 0.05
"""Seconds `ConnectionPool.aside` waits for a pooled connection before it opens one of its
own: enough for one coming back from a statement, never a task's transaction."""
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

SESSION_KEEPALIVES: dict[str, int] = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
}
"""Defaults to TCP keepalives after 10 s idle, every 5 s, 3 unanswered = gone, on every
connection heartq opens: the sessions it keeps open for a worker's life (liveness lock,
LISTEN, the heartbeat) and its pooled ones. A connection whose peer vanished without a
word (a failover, a dropped NAT entry, a partition the kernels notice) fails within ~25 s
instead of hanging for the kernel's hours, so its owner notices and opens a new one; a
pooled connection idle in the pool through a partition is replaced, not handed out dead.
Client side only: the server keeps its own settings, so a partitioned worker still
looks alive (its lock held) until its lease says otherwise. Options in the URL win."""
SESSION_TCP_USER_TIMEOUT_MS = 10_000
"""Defaults to 10 s: data the server has not acknowledged by then fails the connection
(libpq `tcp_user_timeout`, libpq 12 and later), so a statement sent into a partition
errors instead of hanging for the kernel's ~15 minutes of retransmissions. A long
statement is not cut short: the server's kernel acknowledges it at once, however long the
server takes to answer. Every connection, as `SESSION_KEEPALIVES`."""


TCP_OPTIONS = (*SESSION_KEEPALIVES, "tcp_user_timeout")


def tcp_kwargs(given: Mapping[str, Any]) -> dict[str, Any]:
    """Client-side TCP keepalives and `tcp_user_timeout` (libpq 12 and later), except
    those the URL (`given`, its conninfo) sets itself."""
    extra: dict[str, Any] = dict(SESSION_KEEPALIVES)
    if psycopg.pq.version() >= 120000:
        extra["tcp_user_timeout"] = SESSION_TCP_USER_TIMEOUT_MS
    return {k: v for k, v in extra.items() if k not in given}


class _QuietConnectionFailures(logging.Filter):
    """Keeps psycopg_pool's per-attempt connection warnings of heartq's own pools off the
    log, remembering the last one for the error heartq raises instead.

    When the server is unreachable the pool logs a warning for every attempt (about ten
    before its 5 s timeout) and heartq then raises `StoreUnavailable`, whose message now
    carries the last attempt's reason: one line where there were eleven. Likewise its
    warning for each dead connection it was given back (`discarding closed connection`,
    a line of text among a worker's JSON events for every session the server ended):
    heartq reports that state itself (`store_unavailable`). Warnings of other pools in
    the process, and every other pool message, pass untouched."""

    MESSAGES = frozenset(
        {
            "error connecting in %r: %s",
            "reconnection attempt in pool %r failed after %s sec",
        }
    )
    DISCARDED = "discarding closed connection: %s"

    def __init__(self) -> None:
        super().__init__()
        self.pools: weakref.WeakValueDictionary[str, ConnectionPool] = weakref.WeakValueDictionary()

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if not isinstance(args, tuple) or not args:
            return True
        if record.msg == self.DISCARDED:
            return args[0] not in checkout.pooled
        if record.msg not in self.MESSAGES:
            return True
        pool = self.pools.get(str(args[0]))
        if pool is None:
            return True
        if len(args) > 1 and record.msg.startswith("error connecting"):
            pool.last_connect_error = first_line(args[1])
        return False


_quiet = _QuietConnectionFailures()
logging.getLogger("psycopg.pool").addFilter(_quiet)
_pool_names = itertools.count(1)
_pool_names_lock = threading.Lock()


def first_line(exc: object) -> str:
    """The first line of an error's text (its type's name if it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def close_quietly(conn: psycopg.Connection[Any] | None) -> None:
    """Close a session that may already be broken."""
    if conn is not None:
        with contextlib.suppress(Exception):
            conn.close()


HEARTQ_PARAMETERS = ("schema", "pool_size", "pooler", "direct_url", "claim_commit")
"""Query parameters heartq reads itself and keeps from libpq."""


def _heartq_parameters(url: str) -> tuple[dict[str, str], str]:
    """`(heartq's own query parameters, the libpq conninfo URL without them)`."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ConfigError(f"not a PostgreSQL URL: {redact(url)!r}")
    ours: dict[str, str] = {}
    rest = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key in HEARTQ_PARAMETERS:
            ours[key] = value
        else:
            rest.append((key, value))
    conninfo = urlunsplit(parts._replace(scheme="postgresql", query=urlencode(rest)))
    try:
        conninfo_to_dict(conninfo)
    except psycopg.Error as exc:
        raise ConfigError(f"bad PostgreSQL URL {redact(url)!r}: {first_line(exc)}") from None
    return ours, conninfo


def parse_url(url: str) -> tuple[str, str]:
    """`(libpq conninfo URL without heartq's options, schema)`."""
    ours, conninfo = _heartq_parameters(url)
    schema = ours.get("schema", DEFAULT_SCHEMA)
    if not _SCHEMA_NAME.match(schema):
        raise ConfigError(
            f"bad schema name {schema!r}: use lowercase letters, digits and underscores"
        )
    return conninfo, schema


def parse_pooler(url: str, environ: Mapping[str, str] | None = None) -> Pooler:
    """The URL's pooler mode and direct URL (else `HEARTQ_POOLER`, `HEARTQ_DIRECT_URL`);
    a direct URL is checked here: a PostgreSQL URL without heartq's own parameters (its
    schema and pool are the main URL's)."""
    pooler = resolve_pooler(_heartq_parameters(url)[0], environ)
    if pooler.direct_url is not None:
        ours, _ = _heartq_parameters(pooler.direct_url)
        if ours:
            raise ConfigError(
                f"the direct URL {redact(pooler.direct_url)!r} takes connection options "
                f"only, not {', '.join(sorted(ours))} (those of the main URL apply)"
            )
    return pooler


def _positive_int(value: object, where: str) -> int:
    try:
        number = int(str(value))
    except ValueError:
        number = 0
    if number < 1 or isinstance(value, bool):
        raise ConfigError(f"{where} must be a positive whole number, got {value!r}")
    return number


def resolve_pool_size(
    url: str, size: int | None = None, environ: dict[str, str] | None = None
) -> int:
    """The pool size: the argument (`App(pool_size=)`, `Worker(pool_size=)`), else the
    URL's `?pool_size=N`, else `HEARTQ_POOL_SIZE`, else `DEFAULT_POOL_SIZE`: the most
    specific place wins."""
    if size is not None:
        return _positive_int(size, "pool_size")
    given = _heartq_parameters(url)[0].get("pool_size")
    if given is not None:
        return _positive_int(given, "the URL's pool_size")
    env = os.environ if environ is None else environ
    raw = env.get(ENV_POOL_SIZE)
    if raw:
        return _positive_int(raw, ENV_POOL_SIZE)
    return DEFAULT_POOL_SIZE


def translate(
    exc: Exception, url: str, last_connect_error: str | None = None, connecting: bool = False
) -> Exception:
    """The error heartq raises for a driver's: one line, the URL redacted. `connecting`:
    `exc` comes from a connection attempt, where a refusal for good is `StoreRefused`."""
    where = redact(url)
    first = first_line(exc)
    if isinstance(exc, PoolTimeout):
        why = f" ({last_connect_error})" if last_connect_error else ""
        return StoreUnavailable(
            f"cannot reach PostgreSQL at {where}: no connection within {CONNECT_TIMEOUT:g} s" + why
        )
    if connecting and refused_for_good(exc):
        hint = pooler_hint(exc)
        return StoreRefused(f"PostgreSQL at {where} refused the connection: {first}{hint}")
    if connecting and isinstance(exc, psycopg.OperationalError):
        return StoreUnavailable(f"cannot reach PostgreSQL at {where}: {first}")
    if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction):
        return StoreUnavailable(f"PostgreSQL at {where} is read-only: {first}")
    if isinstance(exc, psycopg.OperationalError):
        return StoreUnavailable(f"cannot use PostgreSQL at {where}: {first}")
    if isinstance(exc, psycopg.errors.UniqueViolation):
        return exc  # the caller knows what a constraint means there
    if isinstance(exc, psycopg.DataError):
        return PayloadError(f"PostgreSQL at {where} refused the data: {first}")
    if isinstance(exc, psycopg.errors.InsufficientPrivilege):
        return StoreRefused(f"PostgreSQL at {where} refused: {first}")  # grants, not time
    hint = pooler_hint(exc)
    if hint:  # a transaction-mode pooler heartq was not told of: setup, not time
        return StoreRefused(f"PostgreSQL at {where}: {first}{hint}", reason="pooler")
    return exc


def _configure(conn: psycopg.Connection[Any]) -> None:
    register_loaders(conn.adapters)


def _configure_pooled(conn: psycopg.Connection[Any]) -> None:
    _configure(conn)
    checkout.adopt(conn)


class ConnectionPool:
    """The PostgreSQL store's pool of database connections (over psycopg_pool's), whose
    connections use the heartq schema. Not the worker's `ExecutionPool`, where attempts run."""

    def __init__(self, url: str, size: int | None = None) -> None:
        self.url = url
        self.conninfo, self.schema = parse_url(url)
        self.pooler = parse_pooler(url)
        """Through a transaction-mode pooler: no prepared statements, no startup options,
        each transaction scoped by its first statement, a lasting session only on the
        direct URL (`pooler.py`)."""
        given = _heartq_parameters(url)[0]
        asynchronous = claim_commit.resolve_claim_commit(given, self.pooler.transaction)
        self.claim_async_after = claim_commit.DURABLE_AFTER_START if asynchronous else None
        """Claims commit without waiting for their flush once the server has been up this
        many seconds; None: they always wait (`claim_commit.py`). Read when the pool opens."""
        self._given = conninfo_to_dict(self.conninfo)
        self._pool: psycopg_pool.ConnectionPool[Any] | None = None
        self._size = resolve_pool_size(url, size)
        self._opening = threading.Lock()
        self._checkouts = Checkouts(CONNECT_TIMEOUT)
        self._reached = False
        self.last_connect_error: str | None = None
        """Why the pool's last connection attempt failed (its warning is not logged)."""
        with _pool_names_lock:
            self.name = f"heartq-{next(_pool_names)}"
        _quiet.pools[self.name] = self

    @property
    def connect_kwargs(self) -> dict[str, Any]:
        """What every connection of the pool is opened with: the schema's search path,
        the idle transaction timeout, generic plans for prepared statements, the planner's
        settings, and
        `CONNECT_TIMEOUT` unless the URL sets
        `connect_timeout` (per host: with a multi-host URL, a host that does not answer at
        all costs that long at every connection before the next host is tried). Behind a
        transaction-mode pooler: no startup `options` (a pooler refuses or drops them;
        `_scope` sets the same for each transaction) and no prepared statements
        (`prepare_threshold=None`: a statement prepared on one server session is missing,
        or already there, on the next). Cursors of `NamedCursor`: each statement's
        placeholders converted once (`statements.py`).

        Generic plans (`plan_cache_mode = force_generic_plan`): psycopg prepares a
        statement after its 5th run, and PostgreSQL then keeps its generic plan only while
        the plan's estimate stays near the custom plans'. Otherwise it plans the
        statement again at every run: the claim of several queues always, and the
        one-queue claim once the statistics taken after a held horizon's release tipped
        it over, 2 ms more a claim and in every job's pickup (BENCHMARKS.md, "With the
        ready log"). heartq's statements are written for their generic plans, which
        `tests/plans` pins.

        The planner's settings (`queries/settings.py`, `PLANNER`: no JIT, no sequential
        or bitmap scans): the plans of heartq's statements do not turn with the
        statistics (design/claim.md, "Plans that cannot turn"). A task lent the connection gets
        PostgreSQL's own choices back for its transaction (`borrowed.task_scope`).
        With `claim_commit=async`, heartq's setting that lets a claim commit without
        waiting for its flush (`claim_commit.py`)."""
        kwargs: dict[str, Any] = {"row_factory": dict_row, "cursor_factory": NamedCursor}
        kwargs.update(tcp_kwargs(self._given))
        if self.pooler.transaction:
            kwargs["prepare_threshold"] = None
        else:
            planner = " ".join(f"-c {name}={value}" for name, value in q.PLANNER.items())
            kwargs["options"] = (
                f"-c search_path={self.schema} "
                f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_TIMEOUT_MS} "
                f"-c plan_cache_mode=force_generic_plan {planner}"
            )
            if self.claim_async_after is not None:
                kwargs["options"] += " " + claim_commit.startup_option(self.claim_async_after)
        if "connect_timeout" not in self._given:
            kwargs["connect_timeout"] = int(CONNECT_TIMEOUT)
        return kwargs

    @property
    def size(self) -> int:
        """At most this many pooled connections (sessions of `connect` not counted)."""
        return self._size

    def resize(self, size: int) -> None:
        """Allow at most `size` pooled connections from now on (`Worker(pool_size=)`)."""
        self._size = _positive_int(size, "pool_size")
        if self._pool is not None:
            self._pool.resize(min_size=1, max_size=self._size)

    def reach(self) -> None:
        """One connection attempt outside the pool, closed at once; raises at once why it
        failed: `StoreRefused` for a refusal that waiting will not fix, else
        `StoreUnavailable` (refused, too many clients, starting up, unreachable).

        The pool cannot say this: it retries in the background and a caller learns only
        that no connection came within the timeout. One extra connection per process is
        the price, paid once (`_get_pool`) and by a worker's startup wait."""
        try:
            conn = psycopg.connect(self.conninfo, **self.connect_kwargs)
        except psycopg.Error as exc:
            self.last_connect_error = first_line(exc)
            raise translate(exc, self.url, connecting=True) from None
        try:
            if not self.pooler.transaction:
                self._check_options(conn)
        finally:
            close_quietly(conn)
        self.last_connect_error = None
        self._reached = True

    def _check_options(self, conn: psycopg.Connection[Any]) -> None:
        """`StoreRefused` naming `?pooler=transaction` if the session does not show the
        startup options heartq sent (`refusals.options_dropped`): a pooler dropped them."""
        try:
            row = conn.execute(q.STARTUP_OPTIONS_APPLIED).fetchone()
        except psycopg.Error as exc:
            raise translate(exc, self.url) from None
        dropped = options_dropped(row or {}, self.schema, IDLE_IN_TRANSACTION_TIMEOUT_MS)
        if dropped is not None:
            where = redact(self.url)
            raise StoreRefused(f"PostgreSQL at {where}: {dropped}{POOLER_HINT}", reason="pooler")

    def _get_pool(self) -> psycopg_pool.ConnectionPool[Any]:
        with self._opening:
            if self._pool is None:
                self._open_pool()
            assert self._pool is not None
            return self._pool

    def _open_pool(self) -> None:
        if not self._reached:
            try:
                self.reach()
            except StoreRefused:
                raise
            except StoreUnavailable:
                # Down, full or starting up: the pool waits `CONNECT_TIMEOUT` for it, as
                # for a server that goes away later, and says why if it never comes.
                pass
        self._pool = psycopg_pool.ConnectionPool(
            self.conninfo,
            min_size=1,
            max_size=self._size,
            kwargs=self.connect_kwargs,
            configure=_configure_pooled,
            timeout=CONNECT_TIMEOUT,
            reconnect_timeout=POOL_RECONNECT_WINDOW,
            max_idle=POOL_MAX_IDLE,
            open=True,
            name=self.name,
        )

    @contextlib.contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """One transaction: committed when the block ends, rolled back on an error."""
        with self._connection(autocommit=False) as conn:
            yield conn

    @contextlib.contextmanager
    def autocommit(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection on which each statement is a transaction of its own: for
        the hot operations that are one statement (claim, finish, heartbeat, a plain
        enqueue), whose BEGIN and COMMIT would otherwise cost two more round trips
        (0.15 ms of a 0.7 ms claim here). It goes back to the pool transactional.

        Behind a transaction-mode pooler it is a transaction (`transaction()`): a
        statement needs the transaction's scope (`_scope`) before it, and the scope
        lasts only as long as its transaction."""
        with self._connection(autocommit=not self.pooler.transaction) as conn:
            yield conn

    @contextlib.contextmanager
    def aside(self) -> Iterator[psycopg.Connection[Any]]:
        """`autocommit()` for a statement that must never wait on the pool: a pooled
        connection if one is idle now, else one of its own, opened for it and closed after
        (`Dialect.open_lanes`). Its callers may hold a pooled connection themselves (a task
        enqueuing in its `ctx.transaction()`): had every holder waited for another, at the
        default pool size two such tasks waited on each other until the pool's timeout."""
        pool = self._get_pool()
        taken = self._checkouts.take_idle(pool, ASIDE_WAIT)
        if taken is None:
            with self._connect_aside() as own:  # committed, then closed
                if self.pooler.transaction:
                    self._scope(own)
                yield own
            return
        with self._lent(pool, taken) as conn:
            if self.pooler.transaction:  # one transaction, its scope first
                self._scope(conn)
                yield conn
                return
            conn.autocommit = True
            try:
                yield conn
            finally:
                with contextlib.suppress(psycopg.Error):  # a broken session is discarded
                    conn.autocommit = False

    def _connect_aside(self) -> psycopg.Connection[Any]:
        """A connection outside the pool for `aside`, configured as the pool's are: each
        statement commits by itself, or behind a transaction-mode pooler the block is one
        transaction (`_scope` sets its schema), committed when it ends."""
        try:
            conn = psycopg.connect(
                self.conninfo, autocommit=not self.pooler.transaction, **self.connect_kwargs
            )
        except psycopg.Error as exc:
            raise translate(exc, self.url, connecting=True) from None
        _configure(conn)
        return conn

    @contextlib.contextmanager
    def _connection(self, autocommit: bool) -> Iterator[psycopg.Connection[Any]]:
        try:
            with self._checkout() as conn:
                if autocommit:
                    conn.autocommit = True  # a client-side switch: no round trip
                elif self.pooler.transaction:
                    self._scope(conn)
                try:
                    yield conn
                finally:
                    if autocommit:
                        with contextlib.suppress(psycopg.Error):  # a broken session
                            conn.autocommit = False  # is discarded by the pool anyway
        except (psycopg.Error, PoolTimeout) as exc:
            raise translate(exc, self.url, self.last_connect_error) from exc
        if self.last_connect_error is not None:
            self.last_connect_error = None  # connected since: the reason is out of date

    @contextlib.contextmanager
    def _checkout(self) -> Iterator[psycopg.Connection[Any]]:
        """A sound pooled connection (`checkout.py`), in a block that commits or rolls
        back, and goes back to the pool."""
        pool = self._get_pool()
        with self._lent(pool, self._checkouts.take(pool)) as conn:
            yield conn

    @contextlib.contextmanager
    def _lent(
        self, pool: psycopg_pool.ConnectionPool[Any], conn: psycopg.Connection[Any]
    ) -> Iterator[psycopg.Connection[Any]]:
        """`conn`, taken from `pool`, in a block that commits or rolls back; then back to
        the pool, how it went noted (`checkout.py`: a connection that broke in use makes
        the others lent before then checked before their next use)."""
        began = time.monotonic()
        try:
            with conn:
                yield conn
            self._checkouts.went_well(conn, began)
        except BaseException as exc:
            self._checkouts.went_wrong(conn, exc)
            raise
        finally:
            pool.putconn(conn)

    def _scope(self, conn: psycopg.Connection[Any]) -> None:
        """Behind a transaction-mode pooler: heartq's schema and the idle-in-transaction
        timeout for this transaction only (`set_config(..., true)`), as its first
        statement. (Sent with the BEGIN in one psycopg pipeline it was slower: 0.5 ms a
        read transaction instead of 0.28 ms through PgBouncer here.)"""
        params = {"schema": self.schema, "idle": str(IDLE_IN_TRANSACTION_TIMEOUT_MS)}
        conn.execute(q.TRANSACTION_SCOPE, params)

    @property
    def sessions(self) -> bool:
        """Whether `connect` can open a lasting session: always, except behind a
        transaction-mode pooler without a direct URL."""
        return self.pooler.sessions

    def session_kwargs(self) -> dict[str, Any]:
        """`connect_kwargs` for sessions kept open for a worker's life, with the TCP
        settings of their own URL (a direct URL's) where it gives them."""
        conninfo, _ = self._session_target()
        given = conninfo_to_dict(conninfo)
        kwargs = {k: v for k, v in self.connect_kwargs.items() if k not in TCP_OPTIONS}
        kwargs.update(tcp_kwargs(given))
        if "connect_timeout" in given:  # the session's own URL (a direct URL) says
            kwargs.pop("connect_timeout", None)
        return kwargs

    def _session_target(self) -> tuple[str, str]:
        """`(conninfo, URL named in errors)` of lasting sessions: the queue's URL, or
        behind a transaction-mode pooler its direct URL."""
        if self.pooler.transaction:
            if self.pooler.direct_url is None:
                raise ConfigError(
                    "no lasting session behind a pooler in transaction mode without a "
                    "direct URL (direct_url=, HEARTQ_DIRECT_URL)"
                )
            return _heartq_parameters(self.pooler.direct_url)[1], self.pooler.direct_url
        return self.conninfo, self.url

    def connect(self, autocommit: bool = True) -> psycopg.Connection[Any]:
        """A connection of its own (liveness lock, LISTEN), outside the pool, with
        `session_kwargs`; behind a transaction-mode pooler, to the direct URL."""
        conninfo, url = self._session_target()
        try:
            conn = psycopg.connect(conninfo, autocommit=autocommit, **self.session_kwargs())
        except psycopg.Error as exc:
            raise translate(exc, url, connecting=True) from None
        _configure(conn)
        return conn

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
