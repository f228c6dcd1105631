"""The claims of jobs with a concurrency or a rate key cost what their keys cost, not their
backlogs, nor what other queues hold.

The claim of jobs with a concurrency key looked for the keys with room by reading every
runnable job with a key in its queues, and ranked every queued job of the keys it took:
50,000 jobs over 5 keys cost a claim of 10 141 ms on SQLite and 164 ms on PostgreSQL. The
rate-limited claim found the rate keys of every queue through an index by key, and walked
each key's jobs of other queues for one of its own. Both now find a queue's keys one
probe each of an index by queue and key (schema v45, v46), read each key's best job, and
walk only the keys they take as far as they take. Counted, not timed: SQLite's virtual
machine steps and PostgreSQL's buffers, with 20 jobs a key and with 1,000.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from heartq.model import NewJob
from heartq.store.postgres import PostgresStore
from heartq.store.postgres import queries as pg_q
from heartq.store.postgres.statements import positional
from heartq.store.sqlite import SQLiteStore
from tests import pg_harness
from tests.conformance.support import register
from tests.plans import census
from tests.plans.steps import counting_steps

KEYS = 5
BACKLOGS = (20, 1000)
"""Jobs a key: the read of every keyed job read 50 times more with the second."""


def _keyed(per_key: int) -> list[NewJob]:
    return [NewJob("t", "{}", concurrency_key=f"k{i % KEYS}", concurrency_limit=2)
            for i in range(KEYS * per_key)]  # fmt: skip


def _sqlite_steps(path: Path, per_key: int) -> int:
    """The virtual machine's steps of a claim of 10 (`SQLiteStore.claim`) of a queue of
    `per_key` jobs for each key, after a claim of 10 (each key then runs two)."""
    store = SQLiteStore(f"sqlite:///{path}")
    store.link.migrate()
    register(store, "w1", 0.0)
    store.enqueue(_keyed(per_key), now=0.0)
    assert len(store.claim("w1", ["default"], 10, 30.0, now=1.0)) == 2 * KEYS
    store.enqueue([NewJob("t", "{}", concurrency_key="open", concurrency_limit=3)] * 3, now=0.0)
    try:
        with counting_steps(store.link.pool.get()) as steps:
            taken = store.claim("w1", ["default"], 10, 30.0, now=1.0)
    finally:
        store.link.close()
    assert len(taken) == 3  # the key with room; the others are at their limit
    return steps[0]


def test_sqlite_keyed_claim_follows_the_keys(tmp_path: Path) -> None:
    """Five keys at their limit and one with room: a claim takes the three jobs of the one
    in the same steps within a tenth, whether the full keys hold 20 jobs each or 1,000
    (reading every keyed job: 10 k steps and 455 k)."""
    few, many = (_sqlite_steps(tmp_path / f"{n}.db", n) for n in BACKLOGS)
    assert many <= few * 1.1, (few, many)


def _postgres_buffers(
    server: str, jobs: list[NewJob], names: tuple[str, ...], params: dict[str, Any], takes: int
) -> list[int]:
    """The buffers each of the statements `names` reads on both plans (`census.explain`:
    rolled back) for a claim of 10 of queue `default` (with `params`), in a schema of its
    own holding `jobs`; then a real claim takes `takes` of them."""
    given = {"worker_id": "w1", "queues": ["default"], "limit": 10, "lease": 60, "now": None,
             "ahead": False, **params}  # fmt: skip
    read = []
    with pg_harness.schema_url(server) as url:
        store = PostgresStore(url)
        try:
            store.link.migrate()
            register(store, "w1", None)
            store.enqueue(jobs)
            with store.link.pool.autocommit() as conn:
                for name in names:
                    text, keys = positional(getattr(pg_q, name))
                    values = [given[key] for key in keys]
                    read += [census.explain(conn, text, values, mode).buffers
                             for mode in census.MODES]  # fmt: skip
            assert len(store.claim("w1", ["default"], 10, lease=60)) == takes
        finally:
            store.link.close()
    return read


def test_postgres_keyed_claim_follows_the_keys(pg_server_url: str) -> None:
    """The look for keys with room (`CLAIM_KEYS`) and the claim of the keys locked
    (`CLAIM_KEYED`, with every key given) read at most 80 buffers more, on either plan,
    whether the keys hold 20 jobs each or 1,000: the index deeper (`CLAIM_KEYED` read
    334, 389, 394 and 404 with 20, 400, 4,000 and 12,000 a key: flat past its first
    levels). Reading every keyed job, 160 and 10,000 more."""
    params = {"keys": [f"k{i}" for i in range(KEYS)]}
    few, many = (_postgres_buffers(pg_server_url, _keyed(n), ("CLAIM_KEYS", "CLAIM_KEYED"),
                                   params, 2 * KEYS) for n in BACKLOGS)  # fmt: skip
    for before, after in zip(few, many, strict=True):
        assert after <= before + 80, (few, many)


def _rated_elsewhere(per_key: int) -> list[NewJob]:
    """Rate-limited jobs of another queue: `per_key` for each of five keys."""
    return [NewJob("t", "{}", queue="other", rate_key=f"r{i % KEYS}", rate_limit=1,
                   rate_period=3600.0) for i in range(KEYS * per_key)]  # fmt: skip


def _sqlite_claim_beside(path: Path, per_key: int) -> int:
    """The steps of a claim of queue `default` (three jobs of a rate key of its own, one
    key at a time) beside `per_key` rate-limited jobs a key in queue `other`."""
    store = SQLiteStore(f"sqlite:///{path}")
    store.link.migrate()
    register(store, "w1", 0.0)
    store.enqueue(_rated_elsewhere(per_key), now=0.0)
    own = [NewJob("t", "{}", rate_key="mine", rate_limit=10, rate_period=60.0)] * 3
    store.enqueue(own, now=0.0)
    try:
        with counting_steps(store.link.pool.get()) as steps:
            taken = store.claim("w1", ["default"], 10, 30.0, now=1.0)
    finally:
        store.link.close()
    assert len(taken) == 3
    return steps[0]


def test_sqlite_rated_claim_reads_only_its_own_queues(tmp_path: Path) -> None:
    """A claim of one queue reads nothing of another queue's rate-limited jobs: the same
    steps within a tenth whether that queue holds 20 a key or 1,000 (through an index by
    key, the claim found every queue's keys and walked their jobs for one of its own:
    a claim and its finish 80 ms beside 50,000 of them, 1.2 without)."""
    few, many = (_sqlite_claim_beside(tmp_path / f"{n}.db", n) for n in BACKLOGS)
    assert many <= few * 1.1, (few, many)


def test_postgres_rated_claim_reads_only_its_own_queues(pg_server_url: str) -> None:
    """The look whether a keyed job waits, the look for open rate keys, the claim of their
    jobs and the rate wait, for queue `default`, read at most 40 buffers more whether
    queue `other` holds 20 rate-limited jobs a key or 1,000 (2 to 21 more: their index a
    level deeper for each descent; through an index by key, every key's jobs were walked
    for one of `default`: 23 to 61 ms a claim and its finish beside 50,000, 3.4 without)."""
    names = ("KEYED_QUEUED", "CLAIM_RATE_KEYS", "CLAIM_RATED", "RATE_WAIT")
    own = [NewJob("t", "{}", rate_key="mine", rate_limit=10, rate_period=60.0)] * 3
    params = {"rate_keys": ["mine"], "concurrency_keys": []}
    few, many = (_postgres_buffers(pg_server_url, _rated_elsewhere(n) + own, names, params, 3)
                 for n in BACKLOGS)  # fmt: skip
    for before, after in zip(few, many, strict=True):
        assert after <= before + 40, (few, many)
