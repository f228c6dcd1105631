"""SQLite's claim by fair shares reads each share only as far as it could reach
(`FAIR_CANDIDATES`' `reach`, about `limit` jobs in all rather than `limit` of every
share), and reads again, `limit` each, when a share might have taken more than it read.
What it claims must be what `allot` gives with every share read `limit` deep: here the
shares are read apart, by a plain query of the jobs, and allotted, before each claim of
random mixes of keys, weights, priorities, delayed jobs, jobs without a key, two queues
and claims of any size."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

from heartq.store.sql.fair import UNKEYED, Share, allot
from heartq.store.sqlite import SQLiteStore

from .support import new_job, register

T0 = 1_000_000.0
QUEUES = ["a", "b"]


def _expected(path: Path, limit: int) -> list[str]:
    """The ids `allot` gives with each share's first `limit` runnable jobs, read apart."""
    with sqlite3.connect(path) as conn:
        jobs = conn.execute(
            "SELECT queue, coalesce(fair_key, ?), id, priority, fair_weight FROM heartq_jobs"
            " WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL"
            " AND run_at <= ? ORDER BY priority DESC, run_at, id",
            (UNKEYED, T0),
        ).fetchall()
        served = {(q, k): t for q, k, t in conn.execute(
            "SELECT queue, fair_key, served FROM heartq_fair_shares")}  # fmt: skip
        clocks = dict(conn.execute("SELECT queue, clock FROM heartq_fair_clocks").fetchall())
    shares: dict[tuple[str, str], Share] = {}
    for queue, key, job_id, priority, weight in jobs:
        if (queue, key) not in shares:
            w = 1.0 if key == UNKEYED or weight is None else float(weight)
            shares[(queue, key)] = Share(queue, key, w, [], served.get((queue, key)))
        if len(shares[(queue, key)].jobs) < limit:
            shares[(queue, key)].jobs.append((job_id, priority))
    return allot(list(shares.values()), clocks, limit).ids


def test_a_claim_takes_what_every_share_read_whole_would_give(tmp_path: Path) -> None:
    rng = random.Random(7)
    reads: list[str] = []
    for scenario in range(12):
        path = tmp_path / f"fair{scenario}.db"
        store = SQLiteStore(f"sqlite:///{path}")
        try:
            store.link.migrate()
            register(store, "w1", T0, queues=tuple(QUEUES))
            for n in range(rng.randint(1, 6)):
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
                lambda sql: reads.append(sql) if "reach(n)" in sql else None
            )
            store.link.pool.enable_trace()
            for _ in range(8):
                limit = rng.choice([1, 2, 3, 7, 20])
                expected = _expected(path, limit)
                claimed = store.claim("w1", QUEUES, limit, 30.0, now=T0)
                # the same jobs (a claim hands them over in priority order, then oldest)
                assert sorted(job.id for job in claimed) == sorted(expected), (scenario, limit)
        finally:
            store.link.close()
    exact_reads = sum("CASE WHEN 1 THEN" in sql for sql in reads)
    plain_reads = sum("CASE WHEN 0 THEN" in sql for sql in reads)
    # both paths ran: the claims that read each share only as far as it could reach,
    # and those read again in full because a share took every job read
    assert exact_reads and plain_reads > exact_reads, (exact_reads, plain_reads)
