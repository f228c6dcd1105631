"""Claiming jobs with a concurrency or a rate key: the halves both dialects share.

Why apart from `leases.py`: how keys are claimed is a dialect's strategy
(`Dialect.claim_limited`). SQLite has one writer, so it claims keyed jobs in the claim's
transaction as they are (`one_writer`); PostgreSQL, with many claimers at once, locks the
keys first and hands the locked ones here (`postgres/dialect.py`). What follows the
concurrency keys is the same for both: the jobs with a rate key that fill the slots
left, and how long until a rate-limited job held back may start (`rated`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from heartq.store.sql.base import Rows, run
from heartq.store.sql.statements import Statements

RATE_CONTENDED_RETRY = 0.05
"""Seconds after which a claimer that found a rate key with room held by another claimer
asks again: that claim commits within milliseconds, and the next look sees what it took
(and then the exact wait, or the room left)."""


class KeyedClaims:
    """The keyed claim's statements over one dialect's `q`."""

    def __init__(self, q: Statements) -> None:
        self.q = q

    def queued(self, conn: Any, params: dict[str, Any]) -> bool:
        """Whether a job with a concurrency key is queued in these queues, or one with a
        rate key in any (`KEYED_QUEUED`, the first entry of each partial index): if not,
        the keyed claims would find nothing, and a claim that left slots free (nearly
        every claim of a queue that keeps up) is spared them. A hint, read before any
        key is locked: a keyed job queued just after it is claimed by the next claim,
        as one queued just after the keyed claims would be."""
        return bool(conn.execute(self.q.KEYED_QUEUED, params).fetchone()["queued"])

    def one_writer(self, conn: Any, params: dict[str, Any]) -> tuple[Rows, float | None]:
        """`Dialect.claim_limited` of a database with one writer at a time (SQLite):
        nothing to lock, the statements in the claim's transaction."""
        if not self.queued(conn, params):
            return [], None
        rows = run(conn, self.q.CLAIM_KEYED, params)
        return self.rated(conn, params, rows)

    def rated(
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
            rows = rows + run(conn, self.q.CLAIM_RATED, given)
        wait = None
        if held and len(rows) < params["limit"]:
            found = conn.execute(self.q.RATE_WAIT, params).fetchone()
            wait = None if found is None or found["wait"] is None else float(found["wait"])
        if contended:
            wait = RATE_CONTENDED_RETRY if wait is None else min(wait, RATE_CONTENDED_RETRY)
        return rows, wait
