"""Per-key concurrency limits: at most `concurrency_limit` jobs with one key run at once,
whoever claims, in one batch or many processes; other keys and jobs without a key are
not held back by a busy key."""

from __future__ import annotations

import dataclasses
import importlib
from collections import Counter
from typing import Any

import pytest

from heartq.lifecycle.fate import succeeded
from heartq.model import NewJob
from heartq.store import Store
from tests.conformance.procs import PROCESSES, limited_claimer, run_processes
from tests.conftest import only_on
from tests.statement_trace import trace

from .support import LEASE, keyed_claim_held_open, new_job

# PostgreSQL takes a key's claim lock by the key's name alone (an advisory lock, which
# every schema of a database shares): tests in parallel processes that use the same key
# names ("k") in their own schemas would make each other's claims skip the key. One test
# process runs these files.
pytestmark = pytest.mark.one_at_a_time("key-locks")


def keyed(key: str | None, limit: int | None = 2, **options: Any) -> NewJob:
    if key is None:
        return new_job("plain", **options)
    return new_job("limited", concurrency_key=key, concurrency_limit=limit, **options)


def running_by_key(store: Store) -> Counter[str | None]:
    return Counter(j["concurrency_key"] for j in store.list_jobs(status="running", limit=1000))


def test_a_third_job_of_a_key_waits_while_two_run(store: Store, t0: float) -> None:
    ids = store.enqueue([keyed("tenant:a") for _ in range(3)], now=t0)
    first = store.claim("w1", ["default"], 1, LEASE, now=t0 + 1)
    second = store.claim("w2", ["default"], 1, LEASE, now=t0 + 1)
    assert [c.id for c in first + second] == ids[:2]
    assert store.claim("w3", ["default"], 5, LEASE, now=t0 + 2) == []
    job = store.get_job(ids[2])
    assert job["status"] == "queued"
    assert (job["concurrency_key"], job["concurrency_limit"]) == ("tenant:a", 2)

    assert store.finish([succeeded(first[0], None)], now=t0 + 3) == []  # frees a slot
    (third,) = store.claim("w3", ["default"], 5, LEASE, now=t0 + 4)
    assert third.id == ids[2]


def test_a_claim_of_queues_without_keyed_jobs_asks_once_for_them(
    store: Store, t0: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim that leaves slots free (nearly every claim of a queue that keeps up) looks
    for keyed jobs with one probe, not the keyed claims' statements (on PostgreSQL four
    round trips a claim, half a claimer's time at 500 jobs/s); a job with a concurrency
    or a rate key queued in another queue does not (schema v46: the rated jobs indexed by
    queue too), one with a rate key in this queue sends the claim on to them."""
    sent: list[str] = []
    trace(store, sent.append, monkeypatch)

    def claim(at: float) -> list[str]:
        """The statements of one claim of "default", but SQLite's BEGIN and COMMIT."""
        sent.clear()
        store.claim("w1", ["default"], 5, LEASE, now=at)
        return [s.split()[0] for s in sent if s.split()[0].upper() not in ("BEGIN", "COMMIT")]

    store.enqueue([keyed(None)], now=t0)
    assert len(claim(t0 + 1)) == 2, sent  # the claim, the probe
    store.enqueue([keyed("tenant:a", queue="other")], now=t0)
    assert len(claim(t0 + 2)) == 2, sent
    rated = new_job("rated", rate_key="r", rate_limit=1, rate_period=60.0, queue="other")
    store.enqueue([rated], now=t0)
    assert len(claim(t0 + 3)) == 2, sent
    store.enqueue([dataclasses.replace(rated, queue="default")], now=t0)
    assert len(claim(t0 + 4)) > 2, sent  # on to the keyed claims


def test_other_keys_and_unkeyed_jobs_are_not_held_back(store: Store, t0: float) -> None:
    busy = store.enqueue([keyed("tenant:a", priority=9) for _ in range(6)], now=t0)
    other = store.enqueue([keyed("tenant:b") for _ in range(1)], now=t0 + 1)
    plain = store.enqueue([keyed(None) for _ in range(2)], now=t0 + 2)
    claimed = store.claim("w1", ["default"], 10, LEASE, now=t0 + 3)
    assert sorted(c.id for c in claimed) == sorted(busy[:2] + other + plain)
    assert running_by_key(store) == {"tenant:a": 2, "tenant:b": 1, None: 2}
    assert store.claim("w1", ["default"], 10, LEASE, now=t0 + 4) == []


def test_a_batch_claim_never_exceeds_the_limit(store: Store, t0: float) -> None:
    jobs = [keyed(f"k{i % 3}", limit=i % 3 + 1) for i in range(30)]
    store.enqueue(jobs, now=t0)
    claimed = store.claim("w1", ["default"], 30, LEASE, now=t0 + 1)
    assert len(claimed) == 1 + 2 + 3
    assert running_by_key(store) == {"k0": 1, "k1": 2, "k2": 3}
    # in order within a key: its oldest jobs first
    for key in ("k0", "k1", "k2"):
        queued = [
            j for j in store.list_jobs(status="queued", limit=100) if j["concurrency_key"] == key
        ]
        running = [
            j for j in store.list_jobs(status="running", limit=100) if j["concurrency_key"] == key
        ]
        assert max(j["created_at"] for j in running) <= min(j["created_at"] for j in queued)


def test_keyed_and_unkeyed_share_a_batch_in_claim_order(store: Store, t0: float) -> None:
    plain = store.enqueue([keyed(None) for _ in range(3)], now=t0)
    limited = store.enqueue([keyed("k", limit=1) for _ in range(3)], now=t0)
    claimed = store.claim("w1", ["default"], 2, LEASE, now=t0 + 1)
    assert [c.id for c in claimed] == plain[:2]  # unkeyed work first fills the batch
    claimed = store.claim("w1", ["default"], 5, LEASE, now=t0 + 1)
    assert sorted(c.id for c in claimed) == sorted(plain[2:] + limited[:1])
    execs = store.get_job(limited[0])["executions"]
    assert len(execs) == 1 and execs[0]["worker_id"] == "w1"


def test_the_limit_holds_across_requeues_and_queues(store: Store, t0: float) -> None:
    store.enqueue([keyed("k", limit=1, queue="a"), keyed("k", limit=1, queue="b")], now=t0)
    (job,) = store.claim("w1", ["a"], 5, LEASE, now=t0 + 1)
    assert store.claim("w2", ["b"], 5, LEASE, now=t0 + 1) == []  # one key, across queues
    assert store.release([job.lease], now=t0 + 2) == []
    assert len(store.claim("w2", ["a", "b"], 5, LEASE, now=t0 + 3)) == 1


def test_a_key_starts_its_jobs_in_their_order_whatever_their_limits(
    store: Store, t0: float
) -> None:
    """Whether a key has room is judged by its first runnable job's limit: a newer job of
    the key with a higher limit does not pass an older one held by its own lower limit
    (so a claim reads a key's first job, not all of them: schema v45), and starts with
    it once it may (each job still within its own limit)."""
    old = store.enqueue([keyed("k", limit=1), keyed("k", limit=1)], now=t0)
    newer = store.enqueue([keyed("k", limit=3)], now=t0 + 1)
    (first,) = store.claim("w1", ["default"], 1, LEASE, now=t0 + 2)
    assert first.id == old[0]
    assert store.claim("w2", ["default"], 5, LEASE, now=t0 + 3) == []  # old[1] holds it
    assert store.finish([succeeded(first, None)], now=t0 + 4) == []
    taken = store.claim("w2", ["default"], 5, LEASE, now=t0 + 5)
    assert [c.id for c in taken] == [old[1], *newer]  # then 2 run, within the newer's 3


def test_racing_claimers_never_run_more_than_the_limit(
    store: Store, store_url: str, t0: float
) -> None:
    ids = store.enqueue([keyed("one-key", limit=2) for _ in range(40)], now=t0)
    results = run_processes(limited_claimer, [(store_url, t0, "one-key", 2)] * PROCESSES)
    claimed = [job_id for got, _ in results for job_id in got]
    assert sorted(claimed) == sorted(ids)  # each once
    assert max(most for _, most in results) <= 2
    assert all(j["status"] == "succeeded" for j in store.list_jobs(limit=100))


@only_on("postgres")
def test_a_key_held_by_a_claim_not_yet_committed_is_skipped_by_the_next(
    store: Store, t0: float
) -> None:
    """PostgreSQL's claimers run at once, each counting a key's running jobs in its own
    snapshot: a claim not yet committed is invisible to the next, which would count the
    key as free. The first claimer's lock on the key (held to its commit) makes the next
    skip the key instead. Two queues, so that the second claimer's own ranking of the
    key's jobs does not already exclude the first one's pick."""
    store.enqueue([keyed("k", limit=1, queue="a"), keyed("k", limit=1, queue="b")], now=t0)
    with keyed_claim_held_open(store, "wa", ["a"], t0 + 1) as rows:  # claimer A
        assert len(rows) == 1
        assert store.claim("wb", ["b"], 5, LEASE, now=t0 + 1) == []  # claimer B, meanwhile
    assert running_by_key(store) == {"k": 1}
    assert store.claim("wb", ["b"], 5, LEASE, now=t0 + 2) == []  # A's claim, committed


@pytest.mark.parametrize("step", ["probe", "claim"])
def test_a_failed_keyed_claim_never_strands_the_jobs_the_claim_took(
    store: Store, t0: float, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """A claim takes unkeyed jobs, then (slots left) keyed ones. If the keyed step fails,
    a job is `running` under the claimer exactly when the claim handed it over: on
    PostgreSQL the unkeyed step committed by itself and its jobs are handed over; on
    SQLite, and on PostgreSQL behind a transaction-mode pooler (where the claim is one
    transaction), the one transaction rolls back and the claim raises. Never a job
    running under a worker that does not know it holds it. The keyed step's first
    statement (`step`) is the probe whether any keyed job is queued; then its claims."""
    dialect = "postgres" if type(store).__name__.startswith("Postgres") else "sqlite"
    pooled = dialect == "postgres" and store.link.pool.pooler.transaction  # type: ignore[attr-defined]
    queries = importlib.import_module(f"heartq.store.{dialect}.queries")
    broken = "SELECT key FROM no_such_table"
    claims = "CLAIM_KEYS" if dialect == "postgres" else "CLAIM_KEYED"
    monkeypatch.setattr(queries, "KEYED_QUEUED" if step == "probe" else claims, broken)
    (plain,) = store.enqueue([keyed(None)], now=t0)
    store.enqueue([keyed("tenant:a")], now=t0)
    try:
        handed = [job.id for job in store.claim("w1", ["default"], 5, LEASE, now=t0 + 1)]
    except Exception:  # noqa: BLE001 - which error is the backend's; the state is the point
        handed = []
    running = [j["id"] for j in store.list_jobs(status="running")]
    assert running == handed
    assert handed == ([plain] if dialect == "postgres" and not pooled else [])
    # nothing unkeyed left to take: the keyed step's failure is the claim's
    with pytest.raises(Exception):  # noqa: B017 - any error: it must not pass silently
        store.claim("w1", ["default"], 5, LEASE, now=t0 + 2)
