"""SQLite's claim by turns reads only a window of lanes (at most the claim's slots, found
by a skip scan from each tier's cursor) and each lane only as deep as its rounds in the
claim can reach, reading again the slots deep when a lane might have had more. What it
claims must be what `allot` gives over every lane with work, read in full by a plain
query of the jobs and put in rotation from the stored cursors, before each claim of
random mixes of keys, weights, priorities, delayed jobs, jobs without a key, two queues
and claims of any size."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

from heartq.store.sql.fair import UNKEYED, Cursor, Lane, allot, start
from heartq.store.sqlite import SQLiteStore

from .support import new_job, register

T0 = 1_000_000.0
QUEUES = ["a", "b"]


def _expected(path: Path, limit: int) -> list[str]:
    """The ids `allot` gives with every lane read apart, `limit` jobs deep."""
    with sqlite3.connect(path) as conn:
        jobs = conn.execute(
            "SELECT queue, priority, coalesce(fair_key, ?), id, run_at, fair_weight"
            " FROM heartq_jobs WHERE status = 'queued' AND concurrency_key IS NULL"
            " AND rate_key IS NULL AND run_at <= ? ORDER BY run_at, id",
            (UNKEYED, T0),
        ).fetchall()
        cursors: dict[tuple[str, int], Cursor | None] = {
            (q, p): Cursor(k, r)
            for q, p, k, r in conn.execute(
                "SELECT queue, priority, turn_key, remaining FROM heartq_fair_turns"
            )
        }
    lanes: dict[tuple[str, int, str], Lane] = {}
    for queue, priority, key, job_id, run_at, weight in jobs:
        lane = lanes.get((queue, priority, key))
        if lane is None:
            w = 1.0 if key == UNKEYED or weight is None else float(weight)
            lane = lanes[(queue, priority, key)] = Lane(queue, priority, key, 0, w)
        if len(lane.jobs) < limit:
            lane.jobs.append((job_id, run_at))
    window: list[Lane] = []
    found = 0
    for priority in sorted({p for _, p, _ in lanes}, reverse=True):
        if found >= limit or len(window) >= limit:
            break
        tier: list[Lane] = []
        for queue in QUEUES:
            cursor = cursors.get((queue, priority))
            key, incl = start(cursor)
            keys = sorted(k for q, p, k in lanes if (q, p) == (queue, priority))
            order = [k for k in keys if k > key or (incl and k == key)]
            order += [k for k in keys if k < key or (not incl and k == key)]
            for place, k in enumerate(order):
                lane = lanes[(queue, priority, k)]
                lane.place = place
                if cursor is not None and cursor.key == k and cursor.remaining > 0:
                    lane.continuing = cursor.remaining
                tier.append(lane)
        tier.sort(key=lambda lane: (lane.place, lane.queue))
        tier = tier[: limit - len(window)]
        window += tier
        found += sum(len(lane.jobs) for lane in tier)
    every = {(q, p): cursors.get((q, p)) for q, p, _ in lanes}
    return allot(window, every, limit).ids


def test_a_claim_takes_what_every_lane_read_whole_would_give(tmp_path: Path) -> None:
    rng = random.Random(7)
    reads: list[str] = []
    for scenario in range(16):
        path = tmp_path / f"fair{scenario}.db"
        store = SQLiteStore(f"sqlite:///{path}")
        try:
            store.link.migrate()
            register(store, "w1", T0, queues=tuple(QUEUES))
            for n in range(rng.randint(1, 12)):
                weight = rng.choice([None, 0.5, 1.0, 2.0, 3.0])
                jobs = [
                    new_job(
                        fair_key=f"k{n}",
                        fair_weight=weight,
                        priority=rng.choice([0, 0, 0, 0, 5]),
                        run_at=T0 + (100 if rng.random() < 0.1 else -rng.randint(1, 50)),
                        queue=rng.choice(QUEUES),
                    )
                    for _ in range(rng.choice([1, 2, 5, 40]))
                ]
                store.enqueue(jobs, now=T0 - 100)
            unkeyed = [new_job(queue=rng.choice(QUEUES)) for _ in range(rng.choice([0, 3, 30]))]
            if unkeyed:
                store.enqueue(unkeyed, now=T0 - 100)
            store.link.pool.trace.append(
                lambda sql: reads.append(sql) if "CROSS JOIN heartq_jobs AS j" in sql else None
            )
            store.link.pool.enable_trace()
            for _ in range(10):
                limit = rng.choice([1, 2, 3, 7, 20])
                expected = _expected(path, limit)
                claimed = store.claim("w1", QUEUES, limit, 30.0, now=T0)
                # the same jobs (a claim hands them over in priority order, then oldest)
                assert sorted(job.id for job in claimed) == sorted(expected), (scenario, limit)
        finally:
            store.link.close()
    deep = [sql for sql in reads if "LIMIT 20)" in sql or "LIMIT 7)" in sql]
    # lanes were read shallow (their rounds' reach) far more often than the slots deep
    assert deep and len(reads) > 2 * len(deep), (len(reads), len(deep))
