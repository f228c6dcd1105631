"""Fair shares on SQLite: a claim that takes a queue's fairness keys in turn by start tags.

A job may carry a fairness key (`fair_key`, a template of its task like the concurrency
key's, or the enqueue's) and a weight. Among a queue's runnable jobs of one priority, a
claim gives its slots to the keys in turn, in proportion to their weights, and each
key's jobs in their own order; the jobs without a key form one share of their own. So an
account that enqueued 100,000 jobs first does not hold back the next account's hundred:
that one's first job starts within a claim or two. Higher priorities still go first,
whatever their key.

How (start-time fair queuing, as networks schedule packets): each job that takes turns
is given its place in line, its start tag, when it becomes runnable: the first of its
key at its key's finish, or at its tier's clock if that is further (a tier is a queue
and a priority; its clock is the tag of the last job a claim took there), and each next
one of the key one over its weight after the one before; the key's finish moves past
its last tag. Each key's count of jobs in line follows them in (tagged) and out
(claimed, cancelled, re-routed), and when its line empties its finish is pulled back to
where its claimed jobs end: a key owes turns for the jobs it ran, not for a backlog it
cancelled. A claim takes the jobs in tag
order, one walk of one index (`heartq_jobs_fair_claim_idx`), so its jobs lie together
there whatever the number of keys, and moves its tiers' clocks to the last tags it
took. A flood of 100,000 jobs of
one key gets the tags 0 ... 99,999; ten keys enqueued after it 0 ... 99 each, so the
walk interleaves them; a key back from a pause starts at the clock: no credit for the
time it had no work. The jobs without a key are one share tagged by the claim (the
`n`th at its finish plus `n - 1`), merged with the keyed jobs by tag.

When: an enqueue tags its runnable jobs that take turns in its own transaction
(`tagging`); a job that becomes runnable later (delayed, retried, snoozed, released,
reclaimed, replayed, re-routed, released by its dependencies: a claimed job keeps its
tag while it runs and its attempt's end clears it) is tagged by the first claim that
finds it due, oldest first, at most `TAGGED_AT_A_CLAIM` a claim, so a flood of delayed
jobs falling due at once is tagged over a few claims rather than in one held write
lock.

PostgreSQL's claim takes its ready log's lanes in rotation in its own statement
(`Dialect.fair` is None there; docs/design/limits.md, "Fair shares"): the same
properties (keys in turn, weights, no credit after a pause, each key in order) by
another rule, which keeps its claim flat under a held xmin horizon.

Jobs with a concurrency or a rate key are claimed by their own claims (`keyed.py`),
which take no turns: a key whose jobs all wait on a rate limit holds no one back.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from heartq.store import documents
from heartq.store.records import CLAIMED_COLUMNS
from heartq.store.sql.base import Program, Rows, drive, run
from heartq.store.sql.statements import FairStatements

UNKEYED = ""
"""The key of the share of jobs without a fairness key (a key is never empty)."""

TAGGED_AT_A_CLAIM = 1000
"""The most untagged jobs a claim tags before it takes its jobs: enough for any burst of
retries, bounded so that a flood of delayed jobs falling due at once is tagged over a
few claims (about a millisecond each) rather than in one held write lock."""

Tier = tuple[str, int]
"""A queue and a priority: where tags are compared."""

Turn = Sequence[Any]
"""Where a claimed job stood in the turns: its queue, priority, key (`UNKEYED` for a job
without one), tag and step."""

_QUEUE, _PRIORITY = (CLAIMED_COLUMNS.index(c) for c in ("queue", "priority"))
_TURN = len(CLAIMED_COLUMNS)
"""Where the rows of `CLAIM_TURNS_ONE_QUEUE` carry their job's key, tag and step: after
the claimed columns."""


def takes_turns(doc: dict[str, Any]) -> bool:
    """Whether a new job (its document) is runnable at once and takes turns: a fairness
    key, no concurrency or rate key, no delay. Its enqueue tags it."""
    return doc["fair_key"] is not None and documents.runnable_unlimited(doc)


def tagging(f: FairStatements, queues: str, now: float | None, most: int) -> Program[None]:
    """Tag the runnable untagged jobs that take turns in `queues` (a JSON array), oldest
    first, at most `most` (`TAG_DUE`), and keep their keys' new finishes
    (`STORE_FINISHES`). Oldest first at an enqueue too (not its own jobs first, as an
    insert that tagged them would): a delayed job of a key that fell due before the
    enqueue keeps its place ahead of the key's new jobs."""
    rows = yield (f.TAG_DUE, {"queues": queues, "now": now, "most": most})
    finishes: dict[tuple[str, int, str], tuple[float, int]] = {}
    for queue, priority, key, finish in rows:
        at = (str(queue), int(priority), str(key))
        last, count = finishes.get(at, (float(finish), 0))
        finishes[at] = (max(float(finish), last), count + 1)
    if finishes:
        given = [[q, p, k, finish, n] for (q, p, k), (finish, n) in finishes.items()]
        yield (f.STORE_FINISHES, {"finishes": json.dumps(given)})


@dataclass
class Advance:
    """What a claim of some jobs in tag order moves: each tier's clock to the last tag it
    took there (`clocks`), the finish of each tier's share without a key past the last
    such job it took (`shares`), and how many jobs of each key left its line (`left`)."""

    clocks: dict[Tier, float] = field(default_factory=dict)
    shares: dict[Tier, float] = field(default_factory=dict)
    left: dict[tuple[str, int, str], tuple[int, float]] = field(default_factory=dict)
    """Per key: how many of its jobs were claimed, and where the last of them ends (its
    tag plus its step)."""


def advance(turns: Sequence[Turn]) -> Advance:
    """What a claim of jobs that stood at `turns` moves (`Advance`). Run inside the write
    lock at every claim by turns, so written for its cost (a claim of 50: 20 us, against
    51 with a conversion of each value and a tuple unpacked a job): the values are
    SQLite's own (text, integer, real)."""
    moved = Advance()
    clocks, shares, left = moved.clocks, moved.shares, moved.left
    for queue, priority, key, tag, step in turns:
        tier = (queue, priority)
        end = tag + step
        if tag > clocks.get(tier, -math.inf):
            clocks[tier] = tag
        if key == UNKEYED:
            if end > shares.get(tier, 0.0):
                shares[tier] = end
        else:
            at = (queue, priority, key)
            was = left.get(at)
            left[at] = (1, end) if was is None else (was[0] + 1, max(was[1], end))
    return moved


def claim(
    f: FairStatements, conn: Any, on: Any, params: dict[str, Any], untagged: bool = True
) -> Rows:
    """The claimed rows (read by position, on `on`) of a claim by turns: the due untagged
    jobs tagged (`tagging`; skipped when `untagged` says none waits, as the dialect's
    `KEYED_QUEUED` answers in the claim's transaction), the first `limit` jobs in tag
    order claimed, and the tiers' clocks, the keys' jobs in line and the unkeyed shares'
    finishes moved (`advance`). Its cost grows with its slots and the tiers it serves,
    not with the keys.

    A claim of one queue whose queued jobs all have a key takes its jobs in one
    statement (`claim_line`). Otherwise, or where that took nothing, in two: the jobs
    chosen in tag order across the queues, with the share of the jobs without a key
    (`FAIR_CHOSEN`), then claimed (`CLAIM_CHOSEN`). One statement inside the write lock
    where two would do: SQLite's throughput with keys is the lock's (BENCHMARKS.md,
    "Fair shares")."""
    if untagged:
        drive(conn, tagging(f, params["queues"], params["now"], TAGGED_AT_A_CLAIM))
    rows = claim_line(f, conn, on, params)
    if rows:
        return rows
    chosen = run(conn, f.FAIR_CHOSEN, params)
    if not chosen:
        return []
    rowids = json.dumps([row[0] for row in chosen])
    rows = run(on, f.CLAIM_CHOSEN, dict(params, rowids=rowids))
    _move(f, conn, [row[1:] for row in chosen])
    return rows  # in no order: a claim hands its jobs over in priority order, then oldest


def claim_line(f: FairStatements, conn: Any, on: Any, params: dict[str, Any]) -> Rows:
    """The claimed rows of a claim of one queue by its line alone, in one statement
    (`CLAIM_TURNS_ONE_QUEUE`: a walk of the queue's line that claims as it goes, each row
    carrying its key, tag and step for `advance`), and what it moved stored; [] for a
    claim of several queues, and where the statement takes nothing: a job without a key
    is queued in the queue (its share is tagged by `FAIR_CHOSEN`), or a job that takes
    turns waits there due and untagged (`tagging` first). So a claim whose last one took
    turns may ask it first, before anything else (`LeaseOps.claim`): a statement fewer
    inside the write lock than asking what waits (`KEYED_QUEUED`), then claiming."""
    queues = set(json.loads(params["queues"]))
    if len(queues) != 1:
        return []
    rows = run(on, f.CLAIM_TURNS_ONE_QUEUE, dict(params, queue=queues.pop()))
    if rows:
        _move(f, conn, [(r[_QUEUE], r[_PRIORITY], *r[_TURN:]) for r in rows])
    return rows


def _move(f: FairStatements, conn: Any, turns: Sequence[Turn]) -> None:
    """Store what a claim of the jobs that stood at `turns` moved (`advance`)."""
    moved = advance(turns)
    clocks = [[q, p, clock] for (q, p), clock in moved.clocks.items()]
    run(conn, f.STORE_CLOCKS, {"clocks": json.dumps(clocks)})
    if moved.left:
        left = [[q, p, k, n, served] for (q, p, k), (n, served) in moved.left.items()]
        run(conn, f.LEFT_LINE, {"left": json.dumps(left)})
    if moved.shares:
        shares = [[q, p, UNKEYED, finish, 0] for (q, p), finish in moved.shares.items()]
        run(conn, f.STORE_FINISHES, {"finishes": json.dumps(shares)})
