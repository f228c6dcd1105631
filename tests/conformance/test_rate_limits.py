"""Rate limits: at most `rate_limit` attempts of a key start in any `rate_period` seconds,
whoever claims, in one batch or in racing processes; other keys and jobs without a key
are not held back; retries count as starts; a job with a concurrency key too obeys both;
and the claim says when a job its rate limit held back may start. Driven by `now=`."""

from __future__ import annotations

import importlib
from collections import Counter
from typing import Any

import pytest

from heartq.lifecycle.fate import AttemptEnd, decide, succeeded
from heartq.model import ClaimedJob, NewJob, Outcome
from heartq.store import Store
from heartq.store.sql.keyed import RATE_CONTENDED_RETRY
from tests.conformance.procs import PROCESSES, rate_claimer, run_processes
from tests.conftest import only_on

from .support import LEASE, keyed_claim_held_open, new_job

# PostgreSQL takes a key's claim lock by the key's name alone (an advisory lock, which
# every schema of a database shares): tests in parallel processes that use the same key
# names ("k") in their own schemas would make each other's claims skip the key. One test
# process runs these files.
pytestmark = pytest.mark.one_at_a_time("key-locks")


def rated(key: str | None, limit: int = 2, period: float = 10.0, **options: Any) -> NewJob:
    if key is None:
        return new_job("plain", **options)
    return new_job("rated", rate_key=key, rate_limit=limit, rate_period=period, **options)


def claim(store: Store, now: float, slots: int = 50, worker: str = "w1") -> list[ClaimedJob]:
    return store.claim(worker, ["default"], slots, LEASE, now=now)


def finish_all(store: Store, jobs: list[ClaimedJob], now: float) -> None:
    assert store.finish([succeeded(job, None) for job in jobs], now=now) == []


def test_n_starts_per_period_and_no_more(store: Store, t0: float) -> None:
    ids = store.enqueue([rated("api", limit=3, period=10) for _ in range(8)], now=t0)
    first = claim(store, t0 + 1)
    assert [c.id for c in first] == ids[:3]
    finish_all(store, first, t0 + 1.5)  # ended, but their starts still count
    assert claim(store, t0 + 2) == []
    assert claim(store, t0 + 10.9) == []  # the window is 10 s from the first starts
    second = claim(store, t0 + 11)  # at exactly t+10 they leave it
    assert [c.id for c in second] == ids[3:6]
    assert claim(store, t0 + 12) == []
    job = store.get_job(ids[6])
    assert (job["status"], job["rate_key"], job["rate_limit"]) == ("queued", "api", "3/10s")


def test_any_window_holds_at_most_n_starts(store: Store, t0: float) -> None:
    """Starts spread over time, not in one batch: whatever the window, N at most."""
    store.enqueue([rated("api", limit=2, period=1) for _ in range(12)], now=t0)
    starts: list[float] = []
    for step in range(60):
        now = t0 + step * 0.1
        got = claim(store, now, slots=1)
        starts += [now] * len(got)
        finish_all(store, got, now)
    assert len(starts) == 12
    for start in starts:
        assert sum(1 for s in starts if start <= s < start + 1 - 1e-9) <= 2, starts


def test_keys_are_independent_and_unkeyed_jobs_flow(store: Store, t0: float) -> None:
    a = store.enqueue([rated("a", limit=1, priority=9) for _ in range(4)], now=t0)
    b = store.enqueue([rated("b", limit=2) for _ in range(4)], now=t0)
    plain = store.enqueue([rated(None) for _ in range(3)], now=t0)
    got = claim(store, t0 + 1)
    assert sorted(c.id for c in got) == sorted(a[:1] + b[:2] + plain)
    assert claim(store, t0 + 2) == []


def test_a_limited_job_never_blocks_an_unlimited_one(store: Store, t0: float) -> None:
    """With one slot, a plain job goes first even behind a higher-priority limited one
    whose key has room; a limited job waits for its key's next start whatever its
    priority."""
    (limited,) = store.enqueue([rated("a", limit=1, priority=9)], now=t0)
    plain = store.enqueue([rated(None) for _ in range(2)], now=t0)
    assert [c.id for c in claim(store, t0 + 1, slots=1)] == plain[:1]
    assert {c.id for c in claim(store, t0 + 1, slots=2)} == {plain[1], limited}
    (urgent,) = store.enqueue([rated("a", limit=1, priority=100)], now=t0 + 2)
    assert claim(store, t0 + 3) == []  # its key's window is full: priority does not jump it
    assert [c.id for c in claim(store, t0 + 11)] == [urgent]


def test_within_a_key_highest_priority_then_oldest(store: Store, t0: float) -> None:
    low = store.enqueue([rated("k", limit=2, priority=0) for _ in range(2)], now=t0)
    high = store.enqueue([rated("k", limit=2, priority=5) for _ in range(2)], now=t0 + 1)
    mid = store.enqueue([rated("k", limit=2, priority=3)], now=t0 + 2)
    assert [c.id for c in claim(store, t0 + 3)] == high
    assert [c.id for c in claim(store, t0 + 14)] == mid + low[:1]
    assert [c.id for c in claim(store, t0 + 25)] == low[1:]


def test_a_batch_claim_never_exceeds_any_limit(store: Store, t0: float) -> None:
    jobs = [rated(f"k{i % 3}", limit=i % 3 + 1) for i in range(30)]
    store.enqueue(jobs, now=t0)
    got = claim(store, t0 + 1, slots=30)
    assert len(got) == 1 + 2 + 3
    by_key = Counter(store.get_job(c.id)["rate_key"] for c in got)
    assert by_key == {"k0": 1, "k1": 2, "k2": 3}


def test_the_limit_holds_across_queues(store: Store, t0: float) -> None:
    store.enqueue([rated("k", limit=1, queue="a"), rated("k", limit=1, queue="b")], now=t0)
    assert len(store.claim("w1", ["a"], 5, LEASE, now=t0 + 1)) == 1
    assert store.claim("w2", ["b"], 5, LEASE, now=t0 + 1) == []  # one key, across queues
    assert len(store.claim("w2", ["a", "b"], 5, LEASE, now=t0 + 12)) == 1


def test_retries_and_releases_count_as_starts(store: Store, t0: float) -> None:
    """Every attempt is a start: a retry, and an attempt given back at once, each took
    one of the key's starts (the claim cannot tell a start that did nothing)."""
    (job_id,) = store.enqueue([rated("k", limit=2, max_retries=3, retry_backoff=0.0)], now=t0)
    (first,) = claim(store, t0 + 1)
    failed = decide(first, AttemptEnd(Outcome.FAILED, error="boom"), cancel_requested=False)
    assert store.finish([failed], now=t0 + 1.2) == []
    assert store.get_job(job_id)["status"] == "queued"  # a retry, due at once
    (second,) = claim(store, t0 + 1.5)
    assert second.id == job_id and second.attempt == 2
    assert store.release([second.lease], now=t0 + 2) == []
    assert claim(store, t0 + 3) == []  # two starts in the window: the limit
    assert [c.id for c in claim(store, t0 + 11)] == [job_id]


def test_concurrency_and_rate_limits_together(store: Store, t0: float) -> None:
    both = [
        rated("r", limit=3, period=10, concurrency_key="c", concurrency_limit=1)
        for _ in range(4)
    ]
    ids = store.enqueue(both, now=t0)
    (first,) = claim(store, t0 + 1)  # room for 3 starts, 1 slot of its concurrency key
    assert first.id == ids[0]
    assert claim(store, t0 + 2) == []
    finish_all(store, [first], t0 + 3)
    (second,) = claim(store, t0 + 3)
    finish_all(store, [second], t0 + 4)
    (third,) = claim(store, t0 + 4)
    finish_all(store, [third], t0 + 5)
    assert claim(store, t0 + 5) == []  # the slot is free, the rate key is not
    assert [c.id for c in claim(store, t0 + 11)] == ids[3:]


def test_a_concurrency_slot_goes_to_a_rate_key_that_has_room(store: Store, t0: float) -> None:
    """Two rate keys share one concurrency slot: the job whose rate key is spent does not
    hold the slot from the other one's job, whatever their order."""
    store.enqueue([rated("full", limit=1, priority=5)], now=t0)
    claim(store, t0 + 1)  # spends the key 'full'
    store.enqueue(
        [rated("full", limit=1, priority=5, concurrency_key="c", concurrency_limit=1)],
        now=t0 + 2,
    )
    (other,) = store.enqueue(
        [rated("open", limit=1, concurrency_key="c", concurrency_limit=1)], now=t0 + 2
    )
    assert [c.id for c in claim(store, t0 + 3)] == [other]


def test_keyed_jobs_without_a_rate_key_are_not_held_back(store: Store, t0: float) -> None:
    keyed = store.enqueue(
        [new_job("keyed", concurrency_key="c", concurrency_limit=2) for _ in range(2)], now=t0
    )
    store.enqueue([rated("r", limit=1) for _ in range(2)], now=t0)
    got = claim(store, t0 + 1)
    assert len(got) == 3 and set(keyed) <= {c.id for c in got}


def test_the_claim_says_when_the_next_start_is_free(store: Store, t0: float) -> None:
    store.enqueue([rated("slow", limit=2, period=10) for _ in range(3)], now=t0)
    first = claim(store, t0 + 1)
    assert len(first) == 2 and first.rate_wait == pytest.approx(10.0, abs=0.01)
    held = claim(store, t0 + 4)
    assert held == [] and held.rate_wait == pytest.approx(7.0, abs=0.01)
    store.enqueue([rated("fast", limit=1, period=1) for _ in range(2)], now=t0 + 4)
    both = claim(store, t0 + 4.5)
    assert len(both) == 1 and both.rate_wait == pytest.approx(1.0, abs=0.01)
    assert claim(store, t0 + 5).rate_wait == pytest.approx(0.5, abs=0.01)
    assert len(claim(store, t0 + 5.5)) == 1  # the fast key's last job
    assert claim(store, t0 + 6).rate_wait == pytest.approx(5.0, abs=0.01)


def test_no_wait_without_a_limited_job_held_back(store: Store, t0: float) -> None:
    assert claim(store, t0).rate_wait is None  # nothing queued
    store.enqueue([rated(None), rated("k", limit=1, delay=60)], now=t0)
    got = claim(store, t0 + 1)
    assert len(got) == 1 and got.rate_wait is None  # the limited job is not due yet
    store.enqueue(
        [rated("r", limit=5, concurrency_key="c", concurrency_limit=1) for _ in range(2)],
        now=t0 + 2,
    )
    assert len(claim(store, t0 + 3)) == 1
    held = claim(store, t0 + 3)
    assert held == [] and held.rate_wait is None  # room: a concurrency slot holds it back


def test_racing_claimers_never_start_more_than_the_limit(
    store: Store, store_url: str, t0: float
) -> None:
    ids = store.enqueue([rated("one-key", limit=3, period=10) for _ in range(40)], now=t0)
    results = run_processes(rate_claimer, [(store_url, t0 + 1, "one-key")] * PROCESSES)
    claimed = [job_id for got in results for job_id in got]
    assert len(claimed) == 3 and len(set(claimed)) == 3 and set(claimed) <= set(ids)


@only_on("postgres")
def test_a_rate_key_held_by_a_claim_not_yet_committed_is_skipped_by_the_next(
    store: Store, t0: float
) -> None:
    """PostgreSQL's claimers run at once, each counting a rate key's starts in its own
    snapshot: a claim not yet committed is invisible to the next, which would count the
    key's window as empty and start a second job past a limit of one. The first
    claimer's lock on the key (held to its commit) makes the next skip the key instead,
    and ask again soon. Two queues, so that the second claimer's own ranking of the key's
    jobs does not already exclude the first one's pick (the racing test above rarely
    meets this window)."""
    store.enqueue([rated("k", limit=1, queue="a"), rated("k", limit=1, queue="b")], now=t0)
    with keyed_claim_held_open(store, "wa", ["a"], t0 + 1) as rows:  # claimer A
        assert len(rows) == 1
        meanwhile = store.claim("wb", ["b"], 5, LEASE, now=t0 + 1)  # claimer B
        assert meanwhile == [] and meanwhile.rate_wait == RATE_CONTENDED_RETRY
    assert len(store.list_jobs(status="running")) == 1
    assert store.claim("wb", ["b"], 5, LEASE, now=t0 + 2) == []  # A's start, committed
    assert len(store.claim("wb", ["b"], 5, LEASE, now=t0 + 12)) == 1


@only_on("postgres")
def test_a_concurrency_key_a_rated_claim_holds_is_skipped_by_the_next(
    store: Store, t0: float
) -> None:
    """A job with both keys obeys both: the rated claim locks the concurrency keys of
    its jobs too. Two rate keys with room, one concurrency slot: while claimer A's claim
    of one job is not yet committed, claimer B, whose own rate key is free, must skip
    the shared concurrency key rather than count its slot as free."""
    both = {"concurrency_key": "c", "concurrency_limit": 1}
    store.enqueue([rated("r1", limit=5, queue="a", **both)], now=t0)
    store.enqueue([rated("r2", limit=5, queue="b", **both)], now=t0)
    with keyed_claim_held_open(store, "wa", ["a"], t0 + 1) as rows:  # claimer A
        assert len(rows) == 1
        meanwhile = store.claim("wb", ["b"], 5, LEASE, now=t0 + 1)  # claimer B
        assert meanwhile == [] and meanwhile.rate_wait == RATE_CONTENDED_RETRY
    assert len(store.list_jobs(status="running")) == 1
    assert store.claim("wb", ["b"], 5, LEASE, now=t0 + 2) == []  # A's job holds the slot


def test_a_failed_rated_claim_never_strands_the_jobs_the_claim_took(
    store: Store, t0: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As for keyed jobs: a job is `running` under the claimer exactly when the claim
    handed it over (PostgreSQL: the unkeyed step committed by itself; SQLite: the one
    transaction rolls back and the claim raises)."""
    dialect = "postgres" if type(store).__name__.startswith("Postgres") else "sqlite"
    queries = importlib.import_module(f"heartq.store.{dialect}.queries")
    monkeypatch.setattr(queries, "CLAIM_RATED", "SELECT id FROM no_such_table")
    (plain,) = store.enqueue([rated(None)], now=t0)
    store.enqueue([rated("k")], now=t0)
    try:
        handed = [job.id for job in claim(store, t0 + 1)]
    except Exception:  # noqa: BLE001 - which error is the backend's; the state is the point
        handed = []
    assert [j["id"] for j in store.list_jobs(status="running")] == handed
    assert handed == ([plain] if dialect == "postgres" else [])


def test_each_keys_use_is_visible(store: Store, t0: float) -> None:
    store.enqueue([rated("api", limit=2, period=10) for _ in range(5)], now=t0)
    store.enqueue([rated("later", limit=1, period=60, delay=100)], now=t0)
    store.enqueue([rated(None)], now=t0)
    assert len(claim(store, t0 + 1)) == 3  # two of "api" and the one without a key
    usage = {u["key"]: u for u in store.rate_usage(now=t0 + 4)}
    assert set(usage) == {"api", "later"}
    api = usage["api"]
    assert api.pop("next_start_in") == pytest.approx(7.0, abs=0.01)
    assert api == {"key": "api", "limit": "2/10s", "count": 2, "period": 10.0, "started": 2,
                   "waiting": 3, "queued": 3, "running": 2}  # fmt: skip
    assert usage["later"]["started"] == 0 and usage["later"]["next_start_in"] is None
    assert (usage["later"]["waiting"], usage["later"]["queued"]) == (0, 1)
    later = {u["key"]: u for u in store.rate_usage(now=t0 + 11)}["api"]
    assert (later["started"], later["next_start_in"]) == (0, None)


def test_a_waiting_job_keeps_its_rate_key_and_obeys_it_once_released(
    store: Store, t0: float
) -> None:
    """A job that waits for others (`depends_on`) is stored with its rate key and limit
    like any job, and its key holds it back once it is released."""
    [first] = store.enqueue([new_job("first")], now=t0)
    ids = store.enqueue(
        [rated("api", limit=1, period=10, depends_on=(first,)) for _ in range(2)], now=t0
    )
    assert [store.get_job(x)["rate_key"] for x in ids] == ["api", "api"]
    finish_all(store, claim(store, t0 + 1), t0 + 1)  # the dependency: both released
    assert [c.id for c in claim(store, t0 + 2)] == ids[:1]  # one start per 10 s
    assert claim(store, t0 + 3) == []
    job = store.get_job(ids[1])
    assert (job["status"], job["rate_key"], job["rate_limit"]) == ("queued", "api", "1/10s")
