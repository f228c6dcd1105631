"""Fairness keys as each backend stores and claims them (SQLite: `heartq.store.sql.fair`;
PostgreSQL: its ready log's lanes, `queries/ready_log.py`): a claim takes a queue's keys in
turn, the jobs without a key one share, higher priorities first, each key's jobs in
order, and a share that comes back after a pause earns no credit for it. Through real
workers: tests/integration/test_fair_shares.py."""

from __future__ import annotations

import collections

import pytest

from heartq.store import Store

from .support import new_job, register


def _keys(
    store: Store, t0: float, limit: int, queues: tuple[str, ...] = ("default",)
) -> list[str | None]:
    claimed = store.claim("w1", list(queues), limit, 30.0, now=t0)
    found = [store.get_job(job.id) for job in claimed]
    return [doc["fair_key"] for doc in found if doc is not None]


def test_the_key_and_weight_are_stored(store: Store, t0: float) -> None:
    (keyed, plain) = store.enqueue(
        [new_job(fair_key="acct:1", fair_weight=2.5), new_job()], now=t0
    )
    doc = store.get_job(keyed)
    assert doc is not None and (doc["fair_key"], doc["fair_weight"]) == ("acct:1", 2.5)
    other = store.get_job(plain)
    assert other is not None and (other["fair_key"], other["fair_weight"]) == (None, None)


def test_a_claim_takes_the_keys_in_turn(store: Store, t0: float) -> None:
    register(store, "w1", t0)
    store.enqueue([new_job(fair_key="a") for _ in range(30)], now=t0 - 10)
    store.enqueue([new_job(fair_key="b") for _ in range(3)], now=t0 - 9)
    store.enqueue([new_job() for _ in range(3)], now=t0 - 8)
    taken = collections.Counter(_keys(store, t0, 6))
    assert taken == {"a": 2, "b": 2, None: 2}
    # the next claim goes on from there: b and the unkeyed share have one left each
    taken = collections.Counter(_keys(store, t0, 6))
    assert taken == {"a": 4, "b": 1, None: 1}


def test_once_the_keys_are_served_a_claim_takes_the_jobs_without_one_as_before(
    store: Store, t0: float
) -> None:
    """A claim that found a fairness key waiting asks that first the next time (SQLite:
    the claim of jobs without a key, which takes nothing while one waits, is skipped);
    once the keyed jobs are gone, the next claim takes the others in full, in order, and
    the keyed jobs' turns resume when keyed jobs come back."""
    register(store, "w1", t0)
    store.enqueue([new_job(fair_key="a") for _ in range(2)], now=t0 - 10)
    plain = store.enqueue([new_job() for _ in range(6)], now=t0 - 9)
    assert collections.Counter(_keys(store, t0, 2)) == {"a": 1, None: 1}
    assert collections.Counter(_keys(store, t0, 2)) == {"a": 1, None: 1}
    claimed = store.claim("w1", ["default"], 3, 30.0, now=t0)
    assert [job.id for job in claimed] == plain[2:5]
    store.enqueue([new_job(fair_key="b") for _ in range(2)], now=t0 - 8)
    assert collections.Counter(_keys(store, t0, 2)) == {"b": 1, None: 1}


WORKERS_QUEUES = [("default",), ("default", "other")]
"""A worker of one queue, and of several (PostgreSQL: `CLAIM_IN_ORDER`, and
`CLAIM_QUEUES_IN_ORDER`; with turns `CLAIM_ONE_QUEUE` and `CLAIM`)."""


@pytest.mark.parametrize("queues", WORKERS_QUEUES)
def test_a_key_that_comes_after_claims_in_order_takes_its_turn_at_once(
    store: Store, t0: float, queues: tuple[str, ...]
) -> None:
    """A claim of queues whose jobs have no key takes them in order (PostgreSQL: without
    the turns' machinery); the first claim after a job with a key is queued there takes
    turns (the claim in order saw the key's lane with work, took nothing and said so)."""
    register(store, "w1", t0)
    plain = store.enqueue([new_job() for _ in range(6)], now=t0 - 10)
    assert [job.id for job in store.claim("w1", list(queues), 2, 30.0, now=t0)] == plain[:2]
    store.enqueue([new_job(fair_key="a", queue=queues[-1]) for _ in range(2)], now=t0 - 5)
    assert collections.Counter(_keys(store, t0, 2, queues)) == {"a": 1, None: 1}


@pytest.mark.parametrize("queues", WORKERS_QUEUES)
def test_a_keyed_job_come_due_takes_its_turn_after_claims_in_order(
    store: Store, t0: float, queues: tuple[str, ...]
) -> None:
    """The same for a job with a key that was delayed (no lane of the ready log: the
    claim in order saw it among the due jobs): due later than every job without a key,
    it still takes its turn in the first claim after it came due."""
    register(store, "w1", t0)
    plain = store.enqueue([new_job() for _ in range(6)], now=t0 - 10)
    assert [job.id for job in store.claim("w1", list(queues), 2, 30.0, now=t0)] == plain[:2]
    store.enqueue([new_job(fair_key="a", queue=queues[-1], run_at=t0 + 5)], now=t0)
    assert collections.Counter(_keys(store, t0 + 10, 2, queues)) == {"a": 1, None: 1}


@pytest.mark.parametrize("queues", WORKERS_QUEUES)
def test_a_claim_in_order_takes_the_queues_jobs_by_priority_then_age(
    store: Store, t0: float, queues: tuple[str, ...]
) -> None:
    """Without keys, a claim takes its queues' jobs by priority, then oldest first,
    across the queues, due and fresh alike."""
    register(store, "w1", t0)
    spread = [queues[n % len(queues)] for n in range(6)]
    made = [store.enqueue([new_job(queue=q, run_at=t0 - 60 + n)], now=t0 - 60 + n)[0]
            for n, q in enumerate(spread)]  # fmt: skip
    urgent = store.enqueue([new_job(queue=queues[-1], priority=3)], now=t0 - 1)
    due = store.enqueue([new_job(queue=queues[0], run_at=t0 - 58.5)], now=t0 - 70)
    claimed = [job.id for job in store.claim("w1", list(queues), 5, 30.0, now=t0)]
    assert claimed == [*urgent, *made[:2], *due, made[2]]


def test_a_higher_priority_goes_first_whatever_its_key(store: Store, t0: float) -> None:
    register(store, "w1", t0)
    store.enqueue([new_job(fair_key="a", run_at=t0 - 9) for _ in range(5)], now=t0 - 10)
    store.enqueue(
        [new_job(fair_key="a", priority=5, run_at=t0 - 1) for _ in range(3)], now=t0 - 10
    )
    store.enqueue([new_job(fair_key="b", run_at=t0 - 9) for _ in range(5)], now=t0 - 10)
    claimed = store.claim("w1", ["default"], 4, 30.0, now=t0)
    docs = [store.get_job(job.id) for job in claimed]
    priorities = [doc["priority"] for doc in docs if doc is not None]
    assert sorted(priorities, reverse=True) == [5, 5, 5, 0]


def test_a_share_back_from_a_pause_earns_no_credit(store: Store, t0: float) -> None:
    register(store, "w1", t0)
    store.enqueue([new_job(fair_key="a") for _ in range(2)], now=t0 - 10)
    assert _keys(store, t0, 2) == ["a", "a"]  # a alone: served 2
    store.enqueue([new_job(fair_key="b") for _ in range(40)], now=t0 - 10)
    for _ in range(10):  # b alone now, 20 slots: its time runs far ahead of a's
        assert set(_keys(store, t0, 2)) == {"b"}
    store.enqueue([new_job(fair_key="a") for _ in range(40)], now=t0 - 10)
    # a comes back at the queue's clock, not at its old time: the two share at once
    assert collections.Counter(_keys(store, t0, 10)) == {"a": 5, "b": 5}


def test_more_keys_than_slots_each_take_a_turn_before_any_takes_two(
    store: Store, t0: float
) -> None:
    """With more keys waiting than a claim has slots, the claims go round: every key's
    first job is taken before any key's second, whatever the claims' size."""
    register(store, "w1", t0)
    keys = [f"k{n:02}" for n in range(30)]
    store.enqueue([new_job(fair_key=key) for key in keys for _ in range(3)], now=t0 - 10)
    taken: list[str | None] = []
    for limit in (4, 1, 7, 2, 5, 4, 3, 4):
        taken += _keys(store, t0, limit)
    assert len(taken) == 30 and sorted(taken) == keys  # type: ignore[type-var]
    taken = []
    for limit in (6, 9, 1, 14):
        taken += _keys(store, t0, limit)
    assert sorted(taken) == keys  # type: ignore[type-var]


def test_the_slots_short_keys_leave_go_to_the_others(store: Store, t0: float) -> None:
    """A claim fills its slots when most keys have fewer jobs than their turns in it:
    PostgreSQL walks each lane only as far as its turns could take, then the lanes walked
    that far further for what the short ones left (`further`)."""
    register(store, "w1", t0)
    store.enqueue([new_job(fair_key=f"k{n}") for n in range(10)], now=t0 - 10)
    store.enqueue([new_job(fair_key="long") for _ in range(100)], now=t0 - 9)
    taken = collections.Counter(_keys(store, t0, 50))
    assert taken == {**{f"k{n}": 1 for n in range(10)}, "long": 40}


def test_weights_hold_for_claims_of_one(store: Store, t0: float) -> None:
    """A key of weight 3 takes three slots to another's one, even when each claim has a
    single slot (a busy worker's)."""
    register(store, "w1", t0)
    store.enqueue([new_job(fair_key="heavy", fair_weight=3) for _ in range(40)], now=t0 - 10)
    store.enqueue([new_job(fair_key="light") for _ in range(40)], now=t0 - 10)
    taken = [key for _ in range(40) for key in _keys(store, t0, 1)]
    assert collections.Counter(taken) == {"heavy": 30, "light": 10}


def test_a_key_of_two_queues_takes_its_turns_in_each(store: Store, t0: float) -> None:
    """A claim of several queues (a process worker's, of `default` and `proc`) takes each
    queue's turns apart: a key's lane of one queue is not held back behind the same
    key's older backlog in another, its jobs first claimed only once that drained."""
    register(store, "w1", t0, queues=("default", "other"))
    store.enqueue([new_job(fair_key="a") for _ in range(20)], now=t0 - 10)
    store.enqueue([new_job(fair_key="b") for _ in range(20)], now=t0 - 9)
    store.enqueue([new_job(queue="other", fair_key="a") for _ in range(20)], now=t0 - 8)
    taken: collections.Counter[str] = collections.Counter()
    for _ in range(8):
        claimed = [store.get_job(job.id) for job in store.claim(
            "w1", ["default", "other"], 4, 30.0, now=t0
        )]  # fmt: skip
        lanes = [f"{doc['queue']}/{doc['fair_key']}" for doc in claimed if doc is not None]
        assert "other/a" in lanes  # each claim: a turn of the other queue's lane
        taken.update(lanes)
    assert taken == {"default/a": 12, "default/b": 12, "other/a": 8}


def test_a_transport_claim_by_id_leaves_a_keyed_job_to_its_turn(
    store: Store, t0: float
) -> None:
    register(store, "w1", t0)
    (keyed, plain) = store.enqueue([new_job(fair_key="a"), new_job()], now=t0 - 1)
    taken = store.claim_ids("w1", [keyed, plain], 30.0, now=t0)
    assert [job.id for job in taken] == [plain]


def test_fair_usage_lists_each_queues_keys_busiest_first(
    store: Store, backend: str, t0: float
) -> None:
    """What `heartq queues`, the dashboard and the metrics read (`Store.fair_usage`): per
    queue and key that takes turns, its jobs queued and running and its weight (each
    key's count bounded: a flood is not walked)."""
    register(store, "w1", t0, queues=("default", "other"))
    store.enqueue([new_job(concurrency_key="c", concurrency_limit=2)], now=t0 - 10)
    store.enqueue([new_job(fair_key="flood") for _ in range(30)], now=t0 - 10)
    store.enqueue([new_job(fair_key="b", fair_weight=2.5) for _ in range(3)], now=t0 - 10)
    store.enqueue([new_job() for _ in range(3)], now=t0 - 10)
    store.enqueue([new_job(queue="other", fair_key="z", fair_weight=0.5)], now=t0 - 10)
    # a key's jobs with a concurrency key take no turns: not a fairness key's
    store.enqueue(
        [new_job(fair_key="held", concurrency_key="k", concurrency_limit=1)], now=t0 - 10
    )
    taken = collections.Counter(_keys(store, t0, 6))
    assert taken["flood"] and taken["b"]  # both took turns, b more often (its weight)
    usage = [
        (u["queue"], u["key"], u["queued"], u["running"], u["weight"]) for u in store.fair_usage()
    ]
    busiest = sorted(
        [("default", "b", 3 - taken["b"], taken["b"], 2.5),
         ("default", "flood", 30 - taken["flood"], taken["flood"], 1.0)],
        key=lambda u: (-u[3], -u[2]),
    )  # fmt: skip
    assert usage == [*busiest, ("other", "z", 1, 0, 0.5)]
    assert not any(u["more"] for u in store.fair_usage())
    # each key's count stops where asked, and says it may hold more: the flood is not walked
    counted = {u["key"]: (u["queued"], u["more"]) for u in store.fair_usage(counted=5)}
    assert counted == {"b": (3 - taken["b"], False), "flood": (5, True), "z": (1, False)}
    # a key whose jobs all run is still listed, at its running jobs' weight
    store.claim("w1", ["other"], 1, 30.0, now=t0)
    assert [u for u in store.fair_usage() if u["queue"] == "other"] == [
        {"queue": "other", "key": "z", "queued": 0, "running": 1, "more": False, "weight": 0.5}
    ]


def test_a_key_whose_backlog_was_cancelled_owes_nothing_for_it(store: Store, t0: float) -> None:
    """A key's queued jobs cancelled, its next job is served within a round of the keys,
    not behind the place its cancelled backlog held (SQLite: the key's count of jobs in
    line falls with each cancel, so its next job starts at the clock)."""
    register(store, "w1", t0)
    cancelled = store.enqueue([new_job(fair_key="a") for _ in range(30)], now=t0 - 10)
    store.enqueue([new_job(fair_key="b") for _ in range(30)], now=t0 - 9)
    for job_id in cancelled:
        store.cancel_job(job_id, now=t0 - 8)
    (again,) = store.enqueue([new_job(fair_key="a")], now=t0 - 7)
    taken = [job.id for _ in range(3) for job in store.claim("w1", ["default"], 1, 30.0, now=t0)]
    assert again in taken, taken


def test_a_key_that_queues_one_job_at_a_time_takes_turns_with_a_backlog(
    store: Store, t0: float
) -> None:
    """A key whose next job is queued only once its last one was claimed (a chain) takes
    a turn each round beside a key with a backlog, no more: it owes the turns of the jobs
    it ran, so its next job does not start where its last one did."""
    register(store, "w1", t0)
    store.enqueue([new_job(fair_key="b") for _ in range(20)], now=t0 - 10)
    store.enqueue([new_job(fair_key="a")], now=t0 - 10)
    taken: list[str | None] = []
    for n in range(12):
        keys = _keys(store, t0, 1)
        taken += keys
        if keys == ["a"]:
            store.enqueue([new_job(fair_key="a")], now=t0 - 9 + n * 0.01)
    assert collections.Counter(taken) == {"a": 6, "b": 6}, taken


def test_a_cancelled_backlog_holds_back_none_of_its_keys_next_jobs(
    store: Store, t0: float
) -> None:
    """After a key's whole backlog is cancelled, each of its next jobs, enqueued one by
    one, takes its turn within a round, not behind the place the backlog held."""
    register(store, "w1", t0)
    cancelled = store.enqueue([new_job(fair_key="a") for _ in range(30)], now=t0 - 10)
    store.enqueue([new_job(fair_key="b") for _ in range(30)], now=t0 - 9)
    for job_id in cancelled:
        store.cancel_job(job_id, now=t0 - 8)
    fresh = [store.enqueue([new_job(fair_key="a")], now=t0 - 7)[0] for _ in range(2)]
    taken = [job.id for _ in range(5) for job in store.claim("w1", ["default"], 1, 30.0, now=t0)]
    assert set(fresh) <= set(taken), taken
