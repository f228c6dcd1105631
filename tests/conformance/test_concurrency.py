"""Real concurrency: several OS processes (spawn) on one database.

Each process opens its own store from the URL, waits at a barrier so that all start
together, and reports what it got; the parent checks the union against the database.
Time is still driven with `now=`: only the interleaving is real. The processes' code is
in `procs.py`.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable

import pytest

from heartq.model import JobStatus
from heartq.store import Store, open_store
from tests.conformance import procs
from tests.support import examples

from .support import all_jobs, insert_version_1_job, new_job


@pytest.mark.slow
def test_every_job_is_claimed_exactly_once(store: Store, store_url: str, t0: float) -> None:
    ids = store.enqueue([new_job(args={"i": i}) for i in range(2000)], now=t0)

    per_process = procs.run_processes(procs.claimer, [(store_url, t0)] * procs.PROCESSES)

    claims = Counter(job_id for got in per_process for job_id in got)
    assert sorted(claims) == sorted(ids)
    assert set(claims.values()) == {1}, [j for j, n in claims.items() if n > 1][:10]
    owner = {job_id: f"w{i}" for i, got in enumerate(per_process) for job_id in got}
    for job in store.list_jobs(limit=10_000):
        assert job["status"] == JobStatus.RUNNING
        assert job["worker_id"] == owner[job["id"]]
        assert (job["attempts"], job["execution_id"]) == (1, 1)
    for job_id in random.Random(0).sample(ids, 100):
        (execution,) = store.get_job(job_id)["executions"]
        assert execution["worker_id"] == owner[job_id]


@pytest.mark.slow
def test_racing_reapers_reclaim_each_job_once(store: Store, store_url: str, t0: float) -> None:
    ids = store.enqueue([new_job(max_retries=5) for _ in range(1000)], now=t0)
    claimed = []
    while batch := store.claim("doomed", ["default"], 100, 10, now=t0):
        claimed.extend(batch)
    assert len(claimed) == len(ids)

    per_process = procs.run_processes(procs.reaper, [(store_url, t0 + 100)] * procs.PROCESSES)

    reclaimed = Counter(tuple(r) for got in per_process for r in got)
    assert set(reclaimed.values()) == {1}, "a job was reclaimed twice"
    assert sorted(job_id for job_id, _ in reclaimed) == sorted(ids)
    assert all(eid == 1 for _, eid in reclaimed)
    for job in store.list_jobs(limit=10_000):
        assert job["status"] == JobStatus.QUEUED
        assert job["attempts"] == 1
    every = all_jobs(store)  # the executions as get_job shows them, in two statements
    for job_id in ids:
        (execution,) = every[job_id]["executions"]
        assert execution["outcome"] == "crashed"
        assert execution["crash"]["detected_by"] == "lease_expired"


MIGRATE_TIMEOUT = 300
"""The pytest-timeout of the concurrent migrations (120 s by default): their rounds are
serialized by the migration lock, so their time grows with the machine's load (beside a
CPU burner, 90 s of 120 at load 21 on 2 cores). A hang still fails within
`procs.TIMEOUT` of the last round done."""


@pytest.mark.long(8)
@pytest.mark.slow
@pytest.mark.timeout(MIGRATE_TIMEOUT)
def test_concurrent_migrate_on_a_fresh_database(
    store_factory: Callable[[], Store], fresh_url: Callable[[], str]
) -> None:
    """Four processes migrate the same fresh database at once, on 8 fresh databases in a
    row (25 under `HEARTQ_THOROUGH=1`: a race that is lost only now and then still shows)."""
    reference = store_factory().link.migrate()  # the version a lone migrate reaches
    urls = [fresh_url() for _ in range(examples(8, 25))]

    per_process = procs.run_processes(procs.migrator, [(urls,)] * procs.PROCESSES)

    for versions in per_process:
        assert versions == [reference] * len(urls)
    for url in urls:
        store = open_store(url)
        try:
            assert store.link.migrate() == reference
            (job_id,) = store.enqueue([new_job()])
            assert store.get_job(job_id)["status"] == JobStatus.QUEUED
        finally:
            store.link.close()


@pytest.mark.long(5)
@pytest.mark.slow
@pytest.mark.timeout(MIGRATE_TIMEOUT)
def test_concurrent_upgrade_from_version_1(
    fresh_url: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four processes upgrade the same database of version 1 (with jobs) at once, on 4
    databases in a row (10 under `HEARTQ_THOROUGH=1`): each migration runs once, and
    every process ends at the latest."""
    urls = [fresh_url() for _ in range(examples(4, 10))]
    first = open_store(urls[0])
    dialect = type(first.dialect)  # type: ignore[attr-defined]
    every = first.dialect.migrations()
    first.link.close()
    monkeypatch.setattr(dialect, "migrations", lambda self: every[:1])
    for url in urls:
        old = open_store(url)
        try:
            assert old.link.migrate() == 1
            insert_version_1_job(old, 0.0)
        finally:
            old.link.close()
    monkeypatch.setattr(dialect, "migrations", lambda self: every)

    per_process = procs.run_processes(procs.migrator, [(urls,)] * procs.PROCESSES)

    latest = every[-1][0]
    for versions in per_process:
        assert versions == [latest] * len(urls)
    for url in urls:
        store = open_store(url)
        try:
            assert store.link.migrate() == latest
            assert [j["status"] for j in store.list_jobs()] == [JobStatus.QUEUED]
        finally:
            store.link.close()
