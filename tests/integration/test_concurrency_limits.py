"""Per-key concurrency limits with real workers: three worker processes, 100 jobs of five
keys with a limit of 2 each, and jobs without a key; the running count of each key,
sampled from the database while they run, never goes over 2, and the other keys keep
flowing while one is at its limit."""

from __future__ import annotations

import json
import time
from collections import Counter

from heartq.model import NewJob

from .conftest import STEADY, Harness

KEYS = 5
PER_KEY = 20
LIMIT = 2


def test_a_limit_holds_across_worker_processes(harness: Harness) -> None:
    table = "jobs" if harness.backend == "postgres" else "heartq_jobs"
    args = json.dumps({"seconds": 0.15})
    keyed = [
        NewJob(
            "hold",
            args,
            concurrency_key=f"tenant:{i % KEYS}",
            concurrency_limit=LIMIT,
            max_retries=0,
        )
        for i in range(KEYS * PER_KEY)
    ]
    plain = [NewJob("quick", "{}", max_retries=0) for _ in range(20)]
    for _ in range(3):
        harness.start_worker("--concurrency", "5", settings=STEADY)
    ids = harness.store.enqueue(keyed + plain)

    most: Counter[str] = Counter()
    busiest_moment = 0
    deadline = time.monotonic() + 120
    while True:
        rows = harness.sql(
            f"SELECT concurrency_key, count(*) FROM {table}"
            " WHERE status = 'running' AND concurrency_key IS NOT NULL GROUP BY concurrency_key"
        )
        for key, n in rows:
            most[key] = max(most[key], int(n))
        busiest_moment = max(busiest_moment, len(rows))
        ((left,),) = harness.sql(
            f"SELECT count(*) FROM {table} WHERE status IN ('queued', 'running')"
        )
        if left == 0:
            break
        assert time.monotonic() < deadline, f"{left} jobs still to run; most {most}"
        time.sleep(0.02)  # sampling leaves the workers the cores
    assert max(most.values()) <= LIMIT, most
    assert len(most) == KEYS and max(most.values()) == LIMIT, most  # every key ran
    assert busiest_moment >= 3, "the other keys ran while one was at its limit"
    statuses = Counter(harness.store.get_job(i)["status"] for i in ids)
    assert statuses == {"succeeded": len(ids)}, statuses
