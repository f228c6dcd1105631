"""Whether a claim's commit waits for its WAL to reach the disk (`?claim_commit=`).

`flush` (the default): every claim commits as every other write does, durable when it
answers. `async` (`?claim_commit=async`, else `HEARTQ_CLAIM_COMMIT=async`): a claim of
jobs without a concurrency or a rate key commits without waiting for its flush
(`synchronous_commit = off` for its own transaction, `set_config(..., true)` inside the
statement), and its WAL reaches the disk with the next commit that waits (a finish, an
enqueue) or within PostgreSQL's `wal_writer_delay` (0.2 s; at most three of them).

Why it is safe to offer: a claim the database forgets is a fault heartq already meets
when an asynchronous standby takes over (docs/design/database-bad-days.md, "A failover
that forgets a claim"): the job is queued again, the execution id is issued again, and
the fencing token `(job, execution, worker)` keeps the forgotten attempt from writing
anything. What it costs: after a crash of the server (not a clean stop), the jobs claimed
in its last moment run again, their first runs' results refused. So it is a choice, not
the default. What it buys: two worker processes on 2 cores drained 16-36 % more no-op
jobs a second (BENCHMARKS.md, "A claim that does not wait for its flush"), every claim's
flush no longer queued with the finishes' for the one WAL.

A task that crashes the server itself (a backend's crash restarts every session and
replays the WAL) would, with its claim forgotten each time, never have its attempts
counted. So a claim waits for its flush while the server has been up less than
`DURABLE_AFTER_START` (`pg_postmaster_start_time()`, read by the statement): after each
restart, that poison job's next claims are durable, and it is dead after its retries
(only an attempt claimed on a server up that long can go uncounted).

The choice rides on each pooled connection as a custom setting of heartq's own
(`heartq.claim_async_after`, the seconds the server must have been up), a startup option
the claim's SQL reads (`queries/claim.py`): a connection without it (a task's lent
connection, a store opened with `flush`) claims durably. Behind a transaction-mode
pooler, which drops startup options, `async` is refused.
"""

from __future__ import annotations

from collections.abc import Mapping

from heartq.errors import ConfigError
from heartq.store.postgres.pooler import choose

ENV_CLAIM_COMMIT = "HEARTQ_CLAIM_COMMIT"
"""The environment variable that sets the claim's commit when the URL does not."""
FLUSH = "flush"
ASYNC = "async"
MODES = (FLUSH, ASYNC)
SETTING = "heartq.claim_async_after"
"""The session setting the claim's SQL reads: absent, every claim waits for its flush."""
DURABLE_AFTER_START = 600.0
"""Seconds after the server's start during which every claim waits for its flush."""


def resolve_claim_commit(
    given: Mapping[str, str], transaction_pooler: bool, environ: Mapping[str, str] | None = None
) -> bool:
    """Whether claims commit without waiting for their flush: the URL's own parameter
    (`given`: `claim_commit`), else `HEARTQ_CLAIM_COMMIT`, else `flush`. One clear
    `ConfigError` for a value it does not know, or `async` behind a transaction-mode
    pooler (which drops the startup option that carries it)."""
    mode, where = choose(given, "claim_commit", ENV_CLAIM_COMMIT, MODES, FLUSH, environ)
    if mode == ASYNC and transaction_pooler:
        raise ConfigError(
            f"{where}=async needs sessions of the server's own (a startup option carries "
            "it), not a pooler in transaction mode: drop it there"
        )
    return mode == ASYNC


def startup_option(durable_after_start: float = DURABLE_AFTER_START) -> str:
    """The `-c` option a pooled connection opens with when claims commit without waiting."""
    return f"-c {SETTING}={durable_after_start:g}"
