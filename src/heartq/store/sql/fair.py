"""Fair shares: a claim that takes a queue's fairness keys in rotation.

A job may carry a fairness key (`fair_key`, a template of its task like the concurrency
key's, or the enqueue's) and a weight. Among a queue's runnable jobs of one priority, a
claim gives its slots to the keys in turn, in proportion to their weights, and each
key's jobs in their own order; the jobs without a key form one lane of their own. So an
account that enqueued 100,000 jobs first does not hold back the next account's hundred:
that one's first job starts within a round of the keys. Higher priorities still go
first, whatever their key.

How (deficit round robin, the rule PostgreSQL's claim follows over its ready log's
lanes): a tier is a queue and a priority; its lanes are its keys in key order, the jobs
without a key first (key `UNKEYED`). Each tier has a cursor, the lane that took last
and how many jobs its turn still has (`remaining`). A claim takes the lanes in rotation
from the cursor (that lane again if its turn has jobs left, else the next), each up to
its quantum a round (`max(1, round(weight))`, its first runnable job's weight), and
moves the cursor to where its slots ran out. So a claim looks at no more lanes than it
has slots, however many keys wait; weights hold over a round; a key back from a pause
waits for the cursor to come round (at most a round), with no credit for its idle time.

Where: the turns are decided here (`allot`, pure, tested alone in
tests/unit/test_fair_allot.py), from what the dialect's statements read: the tiers and
their cursors (`FAIR_TIERS`), a priority's lanes in rotation from each cursor, at most
the claim's slots (`FAIR_LANES`), their first jobs, as deep as their rounds can reach
(`FAIR_JOBS`); then the chosen jobs are claimed and the cursors stored, in the claim's
one transaction. SQLite has one writer, so nothing changes between the read and the
write. PostgreSQL's claim takes the same turns in its own statement (`Dialect.fair` is
None there).

Jobs with a concurrency or a rate key are claimed by their own claims (`keyed.py`),
which take no turns: a key whose jobs all wait on a rate limit holds no one back.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from heartq.store.sql.base import Rows, run
from heartq.store.sql.statements import FairStatements

UNKEYED = ""
"""The key of the lane of jobs without a fairness key (a key is never empty)."""


@dataclass(frozen=True)
class Cursor:
    """A tier's stored cursor: the lane that took last and the jobs its turn has left."""

    key: str
    remaining: int


@dataclass
class Lane:
    """A lane of a claim's window: its tier (queue, priority), its key, its place in its
    tier's rotation (0 first), its weight (its first runnable job's), whether it
    continues the cursor's turn (and with how many jobs left), and its first runnable
    jobs in their order (id, run_at)."""

    queue: str
    priority: int
    key: str
    place: int
    weight: float
    jobs: list[tuple[str, float]] = field(default_factory=list)
    continuing: int | None = None
    """The cursor's `remaining` when this lane is the cursor's with jobs left, else None."""

    @property
    def quantum(self) -> int:
        """The jobs a round gives the lane: its weight, rounded, at least one."""
        return max(1, round(self.weight))

    @property
    def opening(self) -> int:
        """The jobs of the lane's first round in this claim: what the cursor's turn has
        left (never more than a quantum) for the lane continuing it, else a quantum."""
        if self.continuing is None:
            return self.quantum
        return min(self.continuing, self.quantum)

    def round(self, n: int) -> int:
        """The round (1 first) of the lane's `n`th job (1 first) in this claim."""
        opening = self.opening  # a property: read once (allot asks this of every job read)
        if n <= opening:
            return 1
        return 1 + -(-(n - opening) // self.quantum)

    def reach(self, rounds: int) -> int:
        """How many of the lane's jobs `rounds` rounds can take."""
        return self.opening + (rounds - 1) * self.quantum


@dataclass(frozen=True)
class Allotment:
    """What a claim took: the job ids in their order, and the tiers' new cursors
    ((queue, priority) -> Cursor) to store."""

    ids: list[str]
    cursors: dict[tuple[str, int], Cursor]


def start(cursor: Cursor | None) -> tuple[str, bool]:
    """Where a tier's rotation starts: the key, and whether that key is itself the first
    lane (the cursor's lane with jobs left in its turn, or the first key without a
    cursor); else the rotation starts past it and comes back to it last."""
    if cursor is None:
        return UNKEYED, True
    return cursor.key, cursor.remaining > 0


def allot(
    lanes: Sequence[Lane], cursors: dict[tuple[str, int], Cursor | None], limit: int
) -> Allotment:
    """Give up to `limit` slots to `lanes` (the window, each lane's jobs in its order,
    `place` its rank in its tier's rotation from the tier's cursor in `cursors`).

    A lane's `n`th job is in round `lane.round(n)`; the candidates are taken by priority
    (highest first), round, place, run_at and id, the first `limit`. Each tier that took
    moves its cursor to the lane of its last job taken, with what that lane's last round
    left of its quantum (in round 1 of the lane continuing the cursor's turn, the part
    of the quantum the turn took before counts as taken). A tier whose only lane is the
    jobs without a key, whose cursor is that lane already, keeps it: no write."""
    candidates = sorted(
        (-lane.priority, lane.round(n), lane.place, run_at, job_id, index)
        for index, lane in enumerate(lanes)
        for n, (job_id, run_at) in enumerate(lane.jobs, start=1)
    )[:limit]
    ids = [c[4] for c in candidates]
    last: dict[tuple[str, int], tuple[int, int]] = {}  # tier -> (lane index, round)
    count: dict[tuple[int, int], int] = {}  # (lane index, round) -> jobs taken
    for _, rnd, _, _, _, index in candidates:
        lane = lanes[index]
        last[(lane.queue, lane.priority)] = (index, rnd)
        count[(index, rnd)] = count.get((index, rnd), 0) + 1
    keyed_tiers = {(lane.queue, lane.priority) for lane in lanes if lane.key != UNKEYED}
    moved: dict[tuple[str, int], Cursor] = {}
    for tier, (index, rnd) in last.items():
        lane = lanes[index]
        taken = count[(index, rnd)]
        if rnd == 1 and lane.continuing is not None:
            taken += lane.quantum - lane.opening
        was = cursors.get(tier)
        if tier not in keyed_tiers and was is not None and was.key == UNKEYED:
            continue
        moved[tier] = Cursor(lane.key, max(0, lane.quantum - taken))
    return Allotment(ids, moved)


def rounds_for(lanes: Sequence[Lane], slots: int) -> int:
    """The fewest rounds in which `lanes`, were their jobs endless, fill `slots` (a
    binary search: each round gives every lane at least one job, so `slots` rounds do)."""
    turns = [(lane.opening, lane.quantum) for lane in lanes]
    low, high = 1, max(1, slots)
    while low < high:
        mid = (low + high) // 2
        if sum(min(slots, o + (mid - 1) * q) for o, q in turns) >= slots:
            high = mid
        else:
            low = mid + 1
    return low


def claim(f: FairStatements, conn: Any, on: Any, params: dict[str, Any]) -> Rows:
    """The claimed rows (read by position, on `on`) of a claim by turns: the tiers and
    their cursors (`FAIR_TIERS`); per priority, highest first, while slots are left, its
    lanes in rotation from each tier's cursor (`FAIR_LANES`, at most the slots not yet
    given a lane) and their first jobs (`FAIR_JOBS`); the slots allotted (`allot`); the
    chosen jobs claimed (`CLAIM_CHOSEN`) and the cursors stored (`STORE_FAIR_TURNS`).

    Its cost grows with the claim's slots and the priorities queued, not with the keys:
    a lane's jobs are read as deep as the rounds that fill the slots reach (the deepest
    over the window: SQLite takes no LIMIT from an outer row). If the lanes hold fewer
    jobs than that and one may have more (it gave all it was asked for), the window is
    read again, the slots deep, before the next priority is looked at."""
    limit = int(params["limit"])
    tiers = run(conn, f.FAIR_TIERS, params)
    cursors: dict[tuple[str, int], Cursor | None] = {}
    priorities: list[int] = []
    for queue, priority, key, remaining in tiers:
        cursors[(queue, int(priority))] = None if key is None else Cursor(key, int(remaining))
        if int(priority) not in priorities:
            priorities.append(int(priority))
    window: list[Lane] = []
    rowids: dict[str, int] = {}  # each job read: its rowid, by which it is claimed
    found = 0  # the jobs read in the window so far
    for priority in priorities:
        if found >= limit or len(window) >= limit:
            break
        lanes = _lanes(f, conn, params, priority, cursors, limit - len(window))
        if not lanes:
            continue
        slots = limit - found
        rounds = rounds_for(lanes, slots)
        cap = max(min(slots, lane.reach(rounds)) for lane in lanes)
        read = _jobs(f, conn, params, priority, lanes, cap, rowids)
        if read < slots and cap < slots and any(len(lane.jobs) == cap for lane in lanes):
            for lane in lanes:
                lane.jobs.clear()
            read = _jobs(f, conn, params, priority, lanes, slots, rowids)
        window.extend(lanes)
        found += read
    chosen = allot(window, cursors, limit)
    if not chosen.ids:
        return []
    chosen_rows = json.dumps([rowids[job_id] for job_id in chosen.ids])
    rows = run(on, f.CLAIM_CHOSEN, dict(params, rowids=chosen_rows))
    if chosen.cursors:
        turns = [[q, p, c.key, c.remaining] for (q, p), c in chosen.cursors.items()]
        run(conn, f.STORE_FAIR_TURNS, {"now": params["now"], "turns": json.dumps(turns)})
    return rows  # in no order: a claim hands its jobs over in priority order, then oldest


def _lanes(
    f: FairStatements,
    conn: Any,
    params: dict[str, Any],
    priority: int,
    cursors: dict[tuple[str, int], Cursor | None],
    need: int,
) -> list[Lane]:
    """The first `need` lanes with runnable jobs of `priority`'s tiers, in rotation
    from each tier's cursor (the tiers side by side by their lanes' places)."""
    tiers = {q: cursors[(q, p)] for (q, p) in cursors if p == priority}
    starts = {q: start(c) for q, c in tiers.items()}
    given = [[q, key, int(incl)] for q, (key, incl) in starts.items()]
    rows = run(conn, f.FAIR_LANES, dict(params, priority=priority, need=need,
                                       tiers=json.dumps(given)))  # fmt: skip
    by_queue: dict[str, list[tuple[int, str, float]]] = {}
    for queue, key, phase, weight in rows:
        key_start, incl = starts[queue]
        if key == UNKEYED:  # the first key: first if the rotation starts there
            phase = 1 if incl and key_start == UNKEYED else 2
        by_queue.setdefault(queue, []).append((int(phase), key, float(weight)))
    lanes: list[Lane] = []
    for queue, found in by_queue.items():
        cursor = tiers[queue]
        for place, (_, key, weight) in enumerate(sorted(found)[:need]):
            lane = Lane(queue, priority, key, place, weight)
            if cursor is not None and cursor.key == key and cursor.remaining > 0:
                lane.continuing = cursor.remaining
            lanes.append(lane)
    lanes.sort(key=lambda lane: (lane.place, lane.queue))
    del lanes[need:]
    return lanes


def _jobs(
    f: FairStatements,
    conn: Any,
    params: dict[str, Any],
    priority: int,
    lanes: list[Lane],
    cap: int,
    rowids: dict[str, int],
) -> int:
    """Read each lane's first `cap` runnable jobs into it, in their order, and their
    rowids into `rowids`; how many."""
    given = json.dumps([[lane.queue, lane.key] for lane in lanes])
    rows = run(conn, f.FAIR_JOBS, dict(params, priority=priority, lanes=given, cap=cap))
    at = {(lane.queue, lane.key): lane for lane in lanes}
    for queue, key, job_id, run_at, rowid in rows:
        at[(queue, key)].jobs.append((job_id, float(run_at)))
        rowids[job_id] = rowid
    for lane in lanes:
        lane.jobs.sort(key=lambda job: (job[1], job[0]))
    return len(rows)
