"""Claiming jobs with a concurrency or a rate key: the slots a claim's jobs without a key
left free, filled without ever running more of a key's attempts than its concurrency
limit, nor starting more within its period than its rate limit; and, first, where a job
with a fairness key waits (SQLite), the claim by fair shares (`fair.py`), which gives the
jobs without a key their one share.

Why apart from `leases.py`: the claim of jobs without a key is one statement; this half
is a transaction of its own with locks, four statements and a wait to work out, and it
is the same logic for both databases. What differs is asked of the dialect, which only
answers: whether the claim needs a transaction of its own for its locks
(`Dialect.own_transaction`) and which keys it locked (`lock_concurrency_keys`,
`lock_rate_keys`: PostgreSQL, with many claimers at once, locks each key before counting
its jobs; SQLite has one writer at a time, locks nothing, and every key goes). What to
claim with those keys, in which order, and when to ask how long a rate limit holds its
jobs back, is decided here.
"""

from __future__ import annotations

import contextlib
from typing import Any

from heartq.store.sql import fair
from heartq.store.sql.base import Dialect, LockedRateKeys, Rows, run

RATE_CONTENDED_RETRY = 0.05
"""Seconds after which a claimer that found a rate key with room held by another claimer
asks again: that claim commits within milliseconds, and the next look sees what it took
(and then the exact wait, or the room left)."""


def claim_keyed(
    d: Dialect, conn: Any, params: dict[str, Any], found: Any = None
) -> tuple[Rows, float | None]:
    """Claimed jobs with a concurrency key, then, slots left, with a rate key, never beyond
    their limits; and the seconds until a runnable rate-limited job held back may start
    (None: none is). `params` are the claim's, `limit` the slots its jobs without a key
    left and `claimed` how many of those it took.

    First, in a statement of its own, whether a keyed job is queued at all (`queued`): a
    claim of queues without one (an idle worker's poll, or a claim of a queue that keeps
    up) pays that one round trip, not the transaction's four. Then, in one transaction,
    each kind of key in two statements: the dialect locks the keys of the first runnable
    jobs for the transaction (those another claimer holds skipped); then a new statement,
    whose snapshot is taken after the locks and so sees every claim of those keys
    committed before them, counts and claims (`CLAIM_KEYED`; slots left, `CLAIM_RATED`
    with the rate keys and the concurrency keys of their jobs), and the rate wait
    (`RATE_WAIT`) only when a rate-limited job is runnable at all.

    Where the claim's statements commit by themselves (PostgreSQL's `write_each`) its
    jobs without a key are the worker's already: if this half fails after some were
    taken, they are handed over all the same and the keyed jobs wait for the next claim
    (which raises the error if it persists, once nothing unkeyed is left to take). In
    one transaction (SQLite; PostgreSQL behind a transaction-mode pooler) the error is
    the claim's, and nothing was taken. `found`: `KEYED_QUEUED`'s row if the claim asked
    it already (SQLite's, which notes whether a fairness key waits: `LeaseOps.claim`)."""
    own = d.own_transaction(conn)  # the keys' locks last until the claim commits
    try:
        # Whether a job with a concurrency key is queued in these queues, one with a rate
        # key in any, or one with a fairness key in these (`KEYED_QUEUED`, the first entry
        # of each partial index): if not, the claims below would find nothing, and a claim
        # that left slots free (nearly every claim of a queue that keeps up) is spared
        # them. A hint, read before any key is locked: a keyed job queued just after it is
        # claimed by the next claim, as one queued just after the keyed claims would be.
        if found is None:
            found = conn.execute(d.q.KEYED_QUEUED, params).fetchone()
        if not found["queued"]:  # one round trip, not the four below
            return [], None
        shared: Rows = []
        if found["fair"] and d.fair is not None:  # SQLite's one writer: fair shares
            on = d.by_position(conn)
            shared = fair.claim(d.fair, conn, on, params, untagged=bool(found["untagged"]))
            if len(shared) >= params["limit"]:
                return shared, None
            left = params["limit"] - len(shared)
            params = dict(params, limit=left, claimed=params["claimed"] + len(shared))
        with own or contextlib.nullcontext():
            keys = d.lock_concurrency_keys(conn, params)
            rows: Rows = []
            if keys is None or keys:
                given = params if keys is None else dict(params, keys=keys)
                rows = run(d.by_position(conn), d.q.CLAIM_KEYED, given)
            if len(rows) >= params["limit"]:
                return shared + rows, None
            locked = d.lock_rate_keys(conn, dict(params, limit=params["limit"] - len(rows)))
            rows, wait = _rated(d, conn, params, rows, keys or [], locked)
            return shared + rows, wait
    except Exception:
        if own is not None and params["claimed"]:
            return [], None
        raise


def _rated(
    d: Dialect,
    conn: Any,
    params: dict[str, Any],
    rows: Rows,
    keys: list[str],
    locked: LockedRateKeys | None,
) -> tuple[Rows, float | None]:
    """`rows` (what the claim took of jobs with a concurrency key) and the jobs with a
    rate key that fill the slots left (`CLAIM_RATED`, with the rate keys `locked` and every
    concurrency key the claim holds: `keys`, and those of the rate keys' jobs; None: no
    locks needed, every key goes), and the rate wait: how long until a rate-limited job
    held back may start (`RATE_WAIT`, read only when slots are still free and such jobs
    are runnable at all). A key with room held by another claimer: ask again soon."""
    left = params["limit"] - len(rows)
    if locked is None or locked.rate:
        given = dict(params, limit=left)
        if locked is not None:
            given.update(rate_keys=locked.rate, concurrency_keys=keys + locked.concurrency)
        rows = rows + run(d.by_position(conn), d.q.CLAIM_RATED, given)
    wait = None
    if (locked is None or locked.held) and len(rows) < params["limit"]:
        found = conn.execute(d.q.RATE_WAIT, params).fetchone()
        wait = None if found is None or found["wait"] is None else float(found["wait"])
    if locked is not None and locked.contended:
        wait = RATE_CONTENDED_RETRY if wait is None else min(wait, RATE_CONTENDED_RETRY)
    return rows, wait
