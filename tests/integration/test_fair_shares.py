"""Fair shares through a real worker process, on both backends (SQLite's start tags in
`store/sql/fair.py`, PostgreSQL's rotation in its claim over the ready log's lanes): one key's
flood queued first does not hold back ten keys queued after it, each key gets its share
of the slots while all have work, each key's jobs run in order, weights are honoured,
and a key whose jobs wait on a rate limit holds no one back."""

from __future__ import annotations

import collections
import json
import textwrap
from typing import Any

import pytest

from heartq.model import NewJob
from tests.conftest import on_every_backend

from .conftest import Harness
from .worker_tasks import TASKS_SOURCE

pytestmark = [pytest.mark.slow, on_every_backend]

NOOP = textwrap.dedent(
    """

    @app.task
    def noop(key, n):
        return None
    """
)
SLOTS = 10


@pytest.fixture
def fair_harness(harness: Harness) -> Harness:
    harness.path("tasks.py").write_text(TASKS_SOURCE + NOOP)
    return harness


def _jobs_table(harness: Harness) -> str:
    return "jobs" if harness.backend == "postgres" else "heartq_jobs"


def _p(harness: Harness) -> str:
    """The driver's placeholder."""
    return "%s" if harness.backend == "postgres" else "?"


def _enqueue(harness: Harness, key: str, count: int, **extra: Any) -> None:
    """`count` jobs of `key` numbered from 0, through the store's enqueue (on SQLite it
    tags them), 10,000 at a time. Their arguments, `{"key": key, "n": n}`, are written as
    text around the key's JSON: `json.dumps` of 100,000 dicts was a twentieth of the
    flood's CPU."""
    prefix = f'{{"key": {json.dumps(key)}, "n": '
    for start in range(0, count, 10_000):
        jobs = [
            NewJob(task="noop", args_json=f"{prefix}{n}}}", fair_key=key, **extra)
            for n in range(start, min(count, start + 10_000))
        ]
        harness.store.enqueue(jobs)


def _started(harness: Harness) -> list[tuple[float, str, int]]:
    """Every started job (its claim's time, its key, its number), in claim order."""
    at = "extract(epoch FROM started_at)" if harness.backend == "postgres" else "started_at"
    rows = harness.sql(
        f"SELECT {at}, fair_key, args FROM {_jobs_table(harness)} WHERE started_at IS NOT NULL"
    )
    found = [
        (float(at), key, (args if isinstance(args, dict) else json.loads(args))["n"])
        for at, key, args in rows
    ]
    return sorted(found)


def _done(harness: Harness, keys: list[str], each: int) -> bool:
    marks = ", ".join(_p(harness) for _ in keys)
    (count,) = harness.sql(
        f"SELECT count(*) FROM {_jobs_table(harness)}"
        f" WHERE status = 'succeeded' AND fair_key IN ({marks})",
        keys,
    )[0]
    return bool(count == len(keys) * each)


@pytest.mark.long(20)
def test_a_flood_queued_first_holds_no_other_key_back(fair_harness: Harness) -> None:
    harness = fair_harness
    _enqueue(harness, "flood", 100_000)
    others = [f"account-{k}" for k in range(10)]
    for key in others:
        _enqueue(harness, key, 100)
    worker = harness.start_worker("--concurrency", str(SLOTS))
    harness.wait_for(lambda: _done(harness, others, 100), 60, "the ten keys' jobs to run")
    worker.kill()
    started = _started(harness)
    claims = sorted({at for at, _, _ in started})
    # every other key's first job started within the first two claims
    for key in others:
        first = min(at for at, k, _ in started if k == key)
        assert claims.index(first) <= 1, (key, claims.index(first))
    # while all eleven had work, each had its share: the flood about a tenth of the
    # ten keys' 1,000 (their last job started at `end`). At most its 100 before the
    # claim that took their last job: a start's time tells claims apart only to SQLite's
    # clock's millisecond, and two claims of one worker can share one (seen: 20 jobs
    # with one start time, 10 slots), so that claim's spare slots may come with the
    # next claim's flood jobs.
    end = max(at for at, k, _ in started if k != "flood")
    before = [n for at, k, n in started if k == "flood" and at < end]
    by_end = [n for at, k, n in started if k == "flood" and at <= end]
    assert len(before) <= 100 and len(by_end) >= 90, (len(before), len(by_end))
    # each key's jobs in their own order, claim by claim
    by_key: dict[str, list[tuple[float, int]]] = collections.defaultdict(list)
    for at, key, n in started:
        by_key[key].append((at, n))
    for key, runs in by_key.items():
        numbers = [n for _, n in sorted(runs)]
        assert numbers == sorted(numbers), key
        assert numbers == list(range(len(numbers))), key


def test_weights_share_the_slots_in_proportion(fair_harness: Harness) -> None:
    harness = fair_harness
    _enqueue(harness, "heavy", 600, fair_weight=3.0)
    _enqueue(harness, "light", 600)
    worker = harness.start_worker("--concurrency", str(SLOTS))
    harness.wait_for(lambda: len(_started(harness)) >= 400, 60, "400 jobs to start")
    worker.kill()
    first = _started(harness)[:400]
    heavy = sum(1 for _, key, _ in first if key == "heavy")
    assert abs(heavy / 400 - 0.75) <= 0.03, heavy


def test_a_key_held_by_its_rate_limit_holds_no_one_back(fair_harness: Harness) -> None:
    harness = fair_harness
    _enqueue(harness, "limited", 200, rate_key="limited", rate_limit=1, rate_period=3600.0)
    others = [f"account-{k}" for k in range(5)]
    for key in others:
        _enqueue(harness, key, 40)
    harness.start_worker("--concurrency", str(SLOTS))
    harness.wait_for(lambda: _done(harness, others, 40), 60, "the other keys' jobs to run")

    def limited_starts() -> int:
        (started,) = harness.sql(
            f"SELECT count(*) FROM {_jobs_table(harness)}"
            " WHERE fair_key = 'limited' AND started_at IS NOT NULL"
        )[0]
        return int(started)

    # its rate limit: one start an hour. The rate-limited claim runs when the others left
    # a claim's slots free, so its one start may come after the last of theirs.
    assert limited_starts() <= 1
    harness.wait_for(lambda: limited_starts() == 1, 30, "the limited key's one start")
