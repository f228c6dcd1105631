"""A claim costs the same however many jobs are scheduled for later.

The claim index is ordered by queue, priority, then `run_at`: a priority's delayed jobs
(scheduled ahead, or retries backing off) lie right after its due ones. A claim that
found fewer due jobs than its slots (a worker that keeps up: most of its claims) walked
on through every delayed job of its queue, 14 ms a claim on SQLite and 717 buffers (6 ms)
on PostgreSQL with 100,000 of them. The claims now walk each priority as a range that
ends at its first job not due yet. Counted, not timed: SQLite's virtual machine steps and
PostgreSQL's buffers, with the delayed jobs at two priorities, before ANALYZE and after.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from heartq.model import NewJob
from heartq.store.postgres import PostgresStore
from heartq.store.postgres import queries as pg_q
from heartq.store.postgres.statements import positional
from heartq.store.sqlite import SQLiteStore
from tests import pg_harness
from tests.conformance.support import register
from tests.plans import census
from tests.plans.steps import counting_steps

DELAYED = 5000
"""Jobs scheduled a day ahead on SQLite, half at each of two priorities (the old walk
read each one: 30 times the steps of a claim of ten)."""

CLAIMS = {
    "one queue": ["default"],
    "two queues": ["default", "other"],
}


KINDS = {
    "plain": {},
    "concurrency-key": {"concurrency_key": "c", "concurrency_limit": 100},
    "rate-key": {"rate_key": "r", "rate_limit": 1000, "rate_period": 60.0},
}
"""The jobs' keys: each kind is read from its own index (a concurrency key's and a rate
key's jobs from the key's range of theirs)."""


def _sqlite_steps(path: Path, queues: list[str], fair: bool) -> tuple[int, list[int]]:
    """The virtual machine's steps of a claim of 10 (`SQLiteStore.claim`, as a worker
    claims), and the priorities of what it took."""
    store = SQLiteStore(f"sqlite:///{path}")
    try:
        with counting_steps(store.link.pool.get()) as steps:
            claimed = store.claim("w1", queues, 10, 30.0, now=1.0)
    finally:
        store.link.close()
    assert fair or len(claimed) == 4
    return steps[0], sorted((job.priority for job in claimed), reverse=True)


@pytest.mark.parametrize(
    ("claim", "kind", "fair"),
    [("one queue", "plain", False), ("two queues", "plain", False), ("one queue", "plain", True),
     ("one queue", "concurrency-key", False), ("one queue", "rate-key", False)],
    ids=["plain", "plain-two-queues", "plain-fair-keys", "concurrency-key", "rate-key"],
)  # fmt: skip
def test_sqlite_claim_walks_no_delayed_job(
    tmp_path: Path, claim: str, kind: str, fair: bool
) -> None:
    """Four due jobs (two at each of two priorities), then 5,000 delayed ones of those
    priorities, all of one `kind`: a claim of 10 takes the four, highest priority first,
    in the same steps within a tenth, before ANALYZE and after. `fair-keys`: the queue
    also has jobs with a fairness key, so a claim by turns runs first (and walks the jobs
    without a key as one share)."""
    queues, keys = CLAIMS[claim], KINDS[kind]
    results = {}
    for state in ("none delayed", "delayed", "delayed, analyzed"):
        path = tmp_path / f"{state}.db"
        store = SQLiteStore(f"sqlite:///{path}")
        store.link.migrate()
        register(store, "w1", 0.0)
        if state != "none delayed":
            store.enqueue([NewJob("t", "{}", priority=i % 2, run_at=1e9, **keys)
                           for i in range(DELAYED)], now=0.0)  # fmt: skip
        store.enqueue([NewJob("t", "{}", priority=p, **keys) for p in (0, 1, 0, 1)], now=0.0)
        if fair:
            store.enqueue([NewJob("t", "{}", fair_key=f"k{i}") for i in range(3)], now=0.0)
        store.link.close()
        if state.endswith("analyzed"):
            with sqlite3.connect(path) as conn:
                conn.execute("ANALYZE")
        results[state] = _sqlite_steps(path, queues, fair)
    base, order = results["none delayed"]
    if not fair:
        assert order == [1, 1, 0, 0], results
    for state, (steps, taken) in results.items():
        assert taken == order, results
        assert steps <= base * 1.1, (state, results)


def _buffers(store: PostgresStore, name: str, params: dict[str, Any]) -> list[int]:
    """The buffers claim statement `name` reads with `params`, on its generic plan and
    planned for its values (`census.explain`: rolled back)."""
    text, keys = positional(getattr(pg_q, name))
    values = [params[key] for key in keys]
    with store.link.pool.autocommit() as conn:
        return [census.explain(conn, text, values, mode).buffers for mode in census.MODES]


# Jobs without a ready log entry (no `ready_xid`), as a retry or a delayed job is, of
# one kind (`KINDS`: their keys, NULL where the kind has none): `due` a second ago, or a
# day ahead; priorities 0 and 1 in turn.
_FILL = """
INSERT INTO job_documents (id, task, queue, args, priority, status, run_at, max_retries,
                  retry_backoff, retry_backoff_max, chosen, created_at, updated_at,
                  concurrency_key, concurrency_limit, rate_key, rate_limit, rate_period)
SELECT (%(prefix)s || lpad(to_hex(i), 12, '0'))::uuid, 't', 'default', '{}', i %% 2,
       'queued', now() + CASE WHEN %(due)s THEN interval '-1 second' ELSE interval '1 day' END,
       3, 5, 300, 15, now(), now(), %(concurrency_key)s, %(concurrency_limit)s,
       %(rate_key)s, %(rate_limit)s, %(rate_period)s
FROM generate_series(1, %(n)s::int) AS i
"""

STATEMENTS = {
    "plain": ("CLAIM_IN_ORDER", "CLAIM_ONE_QUEUE", "CLAIM_QUEUES_IN_ORDER", "CLAIM"),
    "concurrency-key": ("CLAIM_KEYS", "CLAIM_KEYED"),
    "rate-key": ("CLAIM_RATE_KEYS", "CLAIM_RATED", "RATE_WAIT"),
}
"""The statements that read each kind's due jobs."""


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_postgres_claim_walks_no_delayed_job(pg_server_url: str, kind: str) -> None:
    """Four due jobs at two priorities, then 30,000 delayed ones of those priorities (of
    one kind: each claim statement that reads them, `STATEMENTS`): each reads at most 100
    buffers more than with none delayed, on either plan, before ANALYZE and after (40 to
    62 seen: the index two levels deeper for each of five descents, two probes for the
    priorities and the one that finds no more, two walks; and the probes' heap pages
    while the new pages are not all-visible, which autovacuum changes when it runs).
    The walk through every delayed entry read 250 to 310 more (850 to 1,030 with 100,000)."""
    keys = {"concurrency_key": None, "concurrency_limit": None, "rate_key": None,
            "rate_limit": None, "rate_period": None, **KINDS[kind]}  # fmt: skip
    with pg_harness.schema_url(pg_server_url) as url:
        store = PostgresStore(url)
        try:
            store.link.migrate()
            register(store, "w1", None)
            params = {"worker_id": "w1", "queues": ["default", "other"], "queue": "default",
                      "limit": 10, "lease": 60, "now": None, "ahead": False,
                      "keys": ["c"], "rate_keys": ["r"], "concurrency_keys": []}  # fmt: skip

            def read() -> list[int]:
                return [n for name in STATEMENTS[kind] for n in _buffers(store, name, params)]

            fill = {"prefix": "d0000000-0000-7000-8000-", "due": True, "n": 4, **keys}
            with store.link.pool.autocommit() as conn:
                conn.execute(_FILL, fill)
            base = read()
            with store.link.pool.autocommit() as conn:
                fill = {"prefix": "f0000000-0000-7000-8000-", "due": False, "n": 30_000, **keys}
                conn.execute(_FILL, fill)
            delayed = read()
            with store.link.pool.autocommit() as conn:
                conn.execute("ANALYZE job_documents")
            analyzed = read()
            claimed = store.claim("w1", ["default"], 10, lease=60)
        finally:
            store.link.close()
    assert sorted(job.priority for job in claimed) == [0, 0, 1, 1]
    for state, buffers in (("delayed", delayed), ("delayed, analyzed", analyzed)):
        for before, now in zip(base, buffers, strict=True):
            assert now <= before + 100, (state, base, buffers)
