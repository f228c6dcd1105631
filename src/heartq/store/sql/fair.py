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

Where: the decision is made here, from what one dialect statement reads (each share's
first runnable jobs, as many as it could take, the shares' stored times, the queues'
clocks), and written back (the chosen jobs claimed, the times stored), all in the
claim's one transaction: four statements a claim, whatever the keys. SQLite has one
writer, so nothing changes between the read and the write. PostgreSQL's claim takes
keys in turn over its ready log's lanes instead (`Dialect.fair` is None there).

Jobs with a concurrency or a rate key are claimed by their own claims (`keyed.py`),
which take no turns: a key whose jobs all wait on a rate limit holds no one back.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Mapping, Sequence
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
    docstring says; `clocks`: each queue's stored clock (a queue without one: 0).

    Each slot goes to the least next job by (its priority, highest first; its share's
    virtual time once it ran, less its queue's clock; queue; key). Within a share both
    only grow worse job after job (its jobs come in priority order), so the choice is a
    merge of the shares' sequences: a heap of each share's next job, a slot costing a
    pop and a push, not a look at every share."""
    start = [_start(s, clocks.get(s.queue, 0.0)) for s in shares]
    ahead = [start[n] - clocks.get(s.queue, 0.0) for n, s in enumerate(shares)]
    heap = [_next(shares[n], ahead[n], n) for n in range(len(shares)) if shares[n].jobs]
    heapq.heapify(heap)
    ids: list[str] = []
    while heap and len(ids) < limit:
        n = heapq.heappop(heap)[-1]
        share = shares[n]
        ids.append(share.jobs[share.taken][0])
        share.taken += 1
        if share.taken < len(share.jobs):
            heapq.heappush(heap, _next(share, ahead[n], n))
    served = {(s.queue, s.key): start[n] + s.taken / s.weight for n, s in enumerate(shares)}
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


def _next(share: Share, ahead: float, n: int) -> tuple[int, float, str, str, int]:
    """The heap's entry for `share`'s next job (the `n`th share, `ahead` of its queue's
    clock at the claim's start): the least entry is the job `allot` gives a slot."""
    return (-share.jobs[share.taken][1], ahead + (share.taken + 1) / share.weight,
            share.queue, share.key, n)  # fmt: skip


def _start(share: Share, clock: float) -> float:
    """Where a share's time starts at a claim: its stored time, but never behind its
    queue's clock (idle time earns no credit), and the clock for a share without one."""
    return clock if share.served is None else max(share.served, clock)


def claim(f: FairStatements, conn: Any, on: Any, params: dict[str, Any]) -> Rows:
    """The claimed rows (read by position, on `on`) of a claim by fair shares: its
    shares, their first runnable jobs and stored times, and the queues' clocks, read in
    one statement (`FAIR_CANDIDATES`); the slots allotted (`allot`); the chosen jobs
    claimed (`CLAIM_CHOSEN`) and the times stored (`STORE_FAIR_TIMES`). Its cost grows
    with the keys that have jobs queued in these queues (a probe and a read of at most
    `limit` index entries each) and the jobs it returns (about `limit`, and one or two a
    share), not with their backlogs.

    The statement reads each share only as many jobs as one could take (its `reach`,
    from the shares' weights and times): if a share took every job read and may have
    more (the reach below `limit`), the slots might have been given differently with
    more of its jobs in view, so the shares are read again, `limit` each, and allotted
    anew. Only then: a share took more than its turn would give it (a higher priority,
    or others out of jobs); tests/conformance/test_sqlite_fair_reach.py holds the claim
    to the allotment of shares read in full."""
    limit = int(params["limit"])
    shares, clocks, bounds = _candidates(run(conn, f.FAIR_CANDIDATES, dict(params, exact=0)))
    chosen = allot(shares, clocks, limit)
    if any(s.taken == len(s.jobs) == bounds[(s.queue, s.key)] < limit for s in shares):
        shares, clocks, _ = _candidates(run(conn, f.FAIR_CANDIDATES, dict(params, exact=1)))
        chosen = allot(shares, clocks, limit)
    if not chosen.ids:
        return []
    rows = run(on, f.CLAIM_CHOSEN, dict(params, ids=json.dumps(chosen.ids)))
    run(conn, f.STORE_FAIR_TIMES, {
        "now": params["now"],
        "served": json.dumps([[q, k, t] for (q, k), t in chosen.served.items()]),
        "clocks": json.dumps([[q, t] for q, t in chosen.clocks.items()]),
    })  # fmt: skip
    return rows  # in no order: a claim hands its jobs over in priority order, then oldest


def _candidates(
    rows: Rows,
) -> tuple[list[Share], dict[str, float], dict[tuple[str, str], int]]:
    """The shares with jobs (their weights and stored times set), the queues' stored
    clocks, and how many jobs of each share were read at most (its bound), from
    `FAIR_CANDIDATES`' rows, read by position, in any order: (kind, queue, key, id,
    priority, run_at, weight or clock, served, bound), a queue's clock (kind 0), a
    share (1), a job (2). A share's jobs are put in its own order here; its weight is
    its first runnable job's (the latest enqueue decides a key's weight only as its jobs
    come up: a weight is a job's, read where it is taken); the jobs without a key (key
    `UNKEYED`) weigh 1."""
    clocks: dict[str, float] = {}
    shares: dict[tuple[str, str], Share] = {}
    bounds: dict[tuple[str, str], int] = {}
    jobs: list[tuple[str, str, int, float, str]] = []
    for kind, queue, key, job_id, priority, run_at, value, served, bound in rows:
        if kind == 2:
            jobs.append((queue, key, -priority, run_at, job_id))
        elif kind == 1:
            stored = None if served is None else float(served)
            shares[(queue, key)] = Share(queue, key, float(value), [], stored)
            bounds[(queue, key)] = int(bound)
        else:
            clocks[queue] = float(value)
    jobs.sort()
    for queue, key, priority, _, job_id in jobs:
        shares[(queue, key)].jobs.append((job_id, -priority))
    return [s for s in shares.values() if s.jobs], clocks, bounds
