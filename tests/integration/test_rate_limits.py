"""A rate limit across real worker processes: three workers (ten slots each, the default
one-second poll interval) and 210 jobs of one key limited to 30 starts a second, with
jobs without a key beside them. From the executions' start times: no one-second window
holds more than 30 starts, the backlog takes about the 6 s the limit allows (never less,
not much more), and the jobs without a key are not held behind it."""

from __future__ import annotations

import json

from heartq.model import NewJob

from .conftest import STEADY, Harness

LIMIT = 30
JOBS = 210
PLAIN = 20


def test_a_rate_limit_holds_across_worker_processes(harness: Harness) -> None:
    limited = [
        NewJob(
            "quick",
            json.dumps({"value": i}),
            rate_key="fleet",
            rate_limit=LIMIT,
            rate_period=1.0,
            max_retries=0,
        )
        for i in range(JOBS)
    ]
    plain = [NewJob("quick", "{}", max_retries=0) for _ in range(PLAIN)]
    for _ in range(3):
        harness.start_worker("--concurrency", "10", settings={**STEADY, "--poll-interval": "1"})
    ids = harness.store.enqueue(limited + plain)

    def left() -> int:
        return sum(1 for j in harness.store.list_jobs(limit=1000) if j["status"] != "succeeded")

    # The limit spreads the starts over 6 s or more: a look every 0.2 s, not every 20 ms
    # (each lists every job: they were most of the test's own CPU).
    harness.wait_for(lambda: left() == 0, 90, "every job to succeed", left, interval=0.2)
    starts = _starts(harness, "fleet")
    assert len(starts) == JOBS, len(starts)  # each job started once
    for start in starts:  # any window of one second: at most LIMIT starts
        within = [s for s in starts if start <= s < start + 1.0 - 1e-6]
        assert len(within) <= LIMIT, (start, len(within))
    span = starts[-1] - starts[0]
    least = JOBS / LIMIT - 1  # 7 windows: the last one opens 6 s after the first
    assert least - 0.01 <= span <= 2 * least + 5, span
    plain_starts = [_epoch(harness.job(i)["started_at"]) for i in ids[JOBS:]]
    assert max(plain_starts) < starts[0] + 3.0, "jobs without a key waited behind the limit"


def _starts(harness: Harness, key: str) -> list[float]:
    """The start times of the executions of `key`, in seconds since the epoch, sorted."""
    if harness.backend == "postgres":
        query = "SELECT extract(epoch from started_at) FROM executions WHERE rate_key = %s"
    else:
        query = "SELECT started_at FROM heartq_executions WHERE rate_key = ?"
    return sorted(float(row[0]) for row in harness.sql(query, (key,)))


def _epoch(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
