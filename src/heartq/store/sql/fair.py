"""Fair shares: a claim that takes a queue's fairness keys in turn.

A job may carry a fairness key (`fair_key`, a template of its task like the concurrency
key's, or the enqueue's) and a weight. Among a queue's runnable jobs of one priority, a
claim gives its slots to the keys in turn, in proportion to their weights, and each
key's jobs in their own order; the jobs without a key form one share of their own. So
an account that enqueued 100,000 jobs first does not hold back the next account's
hundred: that one's first job starts within a claim or two. Higher priorities still go
first, whatever their key.

How (start-time fair queuing, as Hatchet's round-robin groups and BullMQ Pro's groups
behave): each share (a queue and a key) has a virtual time, `served`, the slots it was
given, each divided by its weight; each queue has a clock, the least virtual time of its
shares that had work at its last claim. A claim gives each slot to the share whose next
job would end soonest in virtual time (`served + 1 / weight`, ties to the lower key),
among the shares whose next job has the highest priority. A share that had no work for a
while starts again at its queue's clock, never below: idle time earns no credit, and a
newcomer shares at once with a flood, instead of running alone until it has caught up.
A worker of several queues compares their shares by how far each is ahead of its own
queue's clock.

Where: the decision is made here, from what the dialect's statements read (each share's
first `limit` runnable jobs, its stored time, the queue's clock) and then written back
(the chosen jobs claimed, the times stored), all in the claim's one transaction. SQLite
has one writer, so nothing changes between the read and the write. PostgreSQL's claim
does not take keys in turn yet (`Dialect.fair` is None there, and its enqueue refuses a
job with a key, in one line, rather than run it first in, first out).

Jobs with a concurrency or a rate key are claimed by their own claims (`keyed.py`),
which take no turns: a key whose jobs all wait on a rate limit holds no one back.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from heartq.store.sql.base import Rows, run
from heartq.store.sql.statements import FairStatements

UNKEYED = ""
"""The key of the share of jobs without a fairness key (a key is never empty)."""


@dataclass
class Share:
    """A share of a claim's slots: a queue and a key (`UNKEYED`: its jobs without one),
    its weight, its first runnable jobs in its own order (id, priority), its stored
    virtual time (None: none stored, a new or long idle share)."""

    queue: str
    key: str
    weight: float
    jobs: list[tuple[str, int]]
    served: float | None = None
    taken: int = field(default=0, init=False)


@dataclass(frozen=True)
class Allotment:
    """What a claim took: the job ids in the order given, and the virtual times to store
    (per share that took, and per queue's clock)."""

    ids: list[str]
    served: dict[tuple[str, str], float]
    clocks: dict[str, float]


def allot(shares: Sequence[Share], clocks: Mapping[str, float], limit: int) -> Allotment:
    """Give up to `limit` slots to `shares` (each with at least one job), as the module's
    docstring says; `clocks`: each queue's stored clock (a queue without one: 0)."""
    start = {id(s): _start(s, clocks.get(s.queue, 0.0)) for s in shares}
    ids: list[str] = []
    while len(ids) < limit:
        heads = [s for s in shares if s.taken < len(s.jobs)]
        if not heads:
            break
        top = max(s.jobs[s.taken][1] for s in heads)
        best = min(
            (s for s in heads if s.jobs[s.taken][1] == top),
            key=lambda s: (
                start[id(s)] - clocks.get(s.queue, 0.0) + (s.taken + 1) / s.weight,
                s.queue,
                s.key,
            ),
        )
        ids.append(best.jobs[best.taken][0])
        best.taken += 1
    served = {(s.queue, s.key): start[id(s)] + s.taken / s.weight for s in shares}
    changed: dict[str, float] = {}
    for queue in {s.queue for s in shares}:
        mine = [s for s in shares if s.queue == queue]
        # the queue's clock: the least time its shares that still have work reached
        # (those that took every job they had are done for now), never back
        going = [s for s in mine if s.taken < len(s.jobs) or len(s.jobs) >= limit] or mine
        clock = max(clocks.get(queue, 0.0), min(served[(s.queue, s.key)] for s in going))
        if clock != clocks.get(queue, 0.0):
            changed[queue] = clock
    took = {(s.queue, s.key): served[(s.queue, s.key)] for s in shares if s.taken}
    return Allotment(ids, took, changed)


def _start(share: Share, clock: float) -> float:
    """Where a share's time starts at a claim: its stored time, but never behind its
    queue's clock (idle time earns no credit), and the clock for a share without one."""
    return clock if share.served is None else max(share.served, clock)


def claim(f: FairStatements, conn: Any, on: Any, params: dict[str, Any]) -> Rows:
    """The claimed rows (read by position, on `on`) of a claim by fair shares: each
    share's first `limit` runnable jobs (the keys found by `FAIR_KEYS`, one probe each of
    their index, then `FAIR_SHARE_JOBS` per key; `UNKEYED_SHARE_JOBS` for the jobs
    without one), their stored times (`FAIR_TIMES`), the slots allotted (`allot`), the
    chosen jobs claimed (`CLAIM_CHOSEN`) and the times stored (`STORE_FAIR_TIMES`).
    Its cost grows with the keys that have jobs queued in these queues (a probe and a
    read of at most `limit` entries each), not with their backlogs."""
    limit = int(params["limit"])
    shares = [_share(r, UNKEYED, r["queue"]) for r in _unkeyed(f, conn, params)]
    for row in run(conn, f.FAIR_KEYS, params):
        jobs = run(conn, f.FAIR_SHARE_JOBS, dict(params, queue=row["queue"], key=row["key"]))
        if jobs:
            shares.append(_keyed(row["queue"], row["key"], jobs))
    shares = _merged(shares)
    if not shares:
        return []
    clocks = _times(f, conn, shares)
    chosen = allot(shares, clocks, limit)
    if not chosen.ids:
        return []
    rows = run(on, f.CLAIM_CHOSEN, dict(params, ids=json.dumps(chosen.ids)))
    run(conn, f.STORE_FAIR_TIMES, {
        "now": params["now"],
        "served": json.dumps([[q, k, t] for (q, k), t in chosen.served.items()]),
        "clocks": json.dumps([[q, t] for q, t in chosen.clocks.items()]),
    })  # fmt: skip
    order = {job_id: n for n, job_id in enumerate(chosen.ids)}
    return sorted(rows, key=lambda row: order[row[0]])


def _unkeyed(f: FairStatements, conn: Any, params: Mapping[str, Any]) -> Rows:
    """The first `limit` runnable jobs without a fairness key of the claim's queues (id,
    queue, priority), in the claim index's order."""
    return run(conn, f.UNKEYED_SHARE_JOBS, params)


def _share(row: Any, key: str, queue: str) -> Share:
    return Share(queue, key, 1.0, [(row["id"], int(row["priority"]))])


def _keyed(queue: str, key: str, jobs: Rows) -> Share:
    """A key's share, its weight its first job's (the latest enqueue decides a key's
    weight only as its jobs come up: a weight is a job's, read where it is taken)."""
    weight = jobs[0]["fair_weight"]
    return Share(
        queue, key, 1.0 if weight is None else float(weight),
        [(j["id"], int(j["priority"])) for j in jobs],
    )  # fmt: skip


def _merged(shares: Iterable[Share]) -> list[Share]:
    """The unkeyed jobs of each queue gathered into that queue's one share."""
    found: dict[tuple[str, str], Share] = {}
    for share in shares:
        held = found.get((share.queue, share.key))
        if held is None:
            found[(share.queue, share.key)] = share
        else:
            held.jobs.extend(share.jobs)
    return list(found.values())


def _times(f: FairStatements, conn: Any, shares: list[Share]) -> dict[str, float]:
    """Each share's stored virtual time set on it; each queue's stored clock returned."""
    given = json.dumps([[s.queue, s.key] for s in shares])
    stored: dict[tuple[str, str], float] = {}
    clocks: dict[str, float] = {}
    for row in run(conn, f.FAIR_TIMES, {"shares": given}):
        if row["key"] is None:
            clocks[row["queue"]] = float(row["served"])
        else:
            stored[(row["queue"], row["key"])] = float(row["served"])
    for share in shares:
        share.served = stored.get((share.queue, share.key))
    return clocks
