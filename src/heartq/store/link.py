"""The store's link to its database (`Store.link`): what keeps a process connected, none
of it an operation on the queue.

Why apart from `Store` (`store/interface.py`): a worker reaches its database, migrates
it, takes its liveness lock and listens through its link once, at startup, and closes
it at the end; `App`, the command line and the dashboard migrate and close through it;
the queue operations never touch it. Each backend has its own (`PostgresLink`: the pool,
the lasting session with its advisory locks and LISTENs; `SQLiteLink`: a connection per
thread, the lock files), and a reader of the queue operations meets none of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # in annotations only: a command that opens no store loads no model
    from heartq.model import LivenessChange


class LivenessHandle(Protocol):
    """Held by a live worker; the OS or the database drops it the instant the process dies."""

    def close(self) -> None: ...


class Link(Protocol):
    """What a process opens, holds and closes around the queue operations (see the
    module docstring)."""

    url: str  # with any password redacted: safe to print and log
    # The URL as given, its secrets with it: only for the worker's own processes (a
    # process pool's children open the store for a task's `ctx.transaction()`), never
    # printed or logged.
    given_url: str
    supports_notify: bool  # True when enqueues wake idle workers on other hosts
    # Whether this store's workers hold a liveness lock (False: behind a transaction-mode
    # pooler without a direct URL; such workers are found by heartbeats and leases).
    holds_liveness_lock: bool
    # `flush`: a claim is durable when it answers; `async`: a PostgreSQL claim of jobs
    # without a concurrency or a rate key does not wait for its flush (`?claim_commit=`).
    claim_commit: str

    def reach(self) -> None:
        """One attempt to reach the database, at once. Raises `StoreRefused` (or
        `ConfigError`) for what waiting will not fix, `StoreUnavailable` for what may pass
        (down, full, starting up, locked). A worker waits for its database with it."""
        ...

    def migrate(self) -> int:
        """Create or upgrade the schema; safe from many processes at once. Returns the version."""
        ...

    def deployment_id(self) -> str:
        """The id `migrate` made once for this database (a PostgreSQL schema), never
        changed: what names its NATS stream, subjects and consumers, so two deployments
        sharing a NATS server never meet (docs/NATS.md, "Names")."""
        ...

    def resize_pool(self, size: int) -> None:
        """At most `size` pooled connections from now on (nothing to do without a pool)."""
        ...

    def liveness_hold(
        self, worker_id: str, on_change: Callable[[LivenessChange], None] | None = None
    ) -> LivenessHandle:
        """Take this worker's liveness lock; keep the handle for the worker's life.
        `on_change` hears when a lock that lives on a database session is lost with its
        session and taken again (never for a lock the OS holds)."""
        ...

    def listen(
        self, on_wake: Callable[[], None], on_due: Callable[[float], None] | None = None
    ) -> LivenessHandle | None:
        """Call `on_wake()` when jobs become available, and `on_due(seconds)` when delayed
        jobs are enqueued (the soonest falls due in `seconds`); None if the backend cannot
        tell (`supports_notify` False: workers then poll)."""
        ...

    def listen_cancels(
        self, worker_id: str, on_cancel: Callable[[], None]
    ) -> LivenessHandle | None:
        """Call `on_cancel()` when a cancel is requested of a job `worker_id` runs (or
        such a request may have been missed); None if the backend cannot tell (its pulse
        then reads `cancel_requests` every tick)."""
        ...

    def listen_ends(self, on_end: Callable[[str | None], None]) -> LivenessHandle | None:
        """Call `on_end(job_id)` when an awaited job ends (`Inspector.await_end`),
        `on_end(None)` when ends may have been missed (the session was re-opened); None if
        the backend cannot tell (waiters then poll)."""
        ...

    def close(self) -> None:
        """Close the pool, the lasting session and every handle taken on it."""
        ...
