"""The allotment of a claim's slots to fair shares (`heartq.store.sql.fair.allot`), as
logic without a database: turns, weights, priorities, a queue's clock, and shares of
several queues compared by how far each is ahead of its own queue's clock."""

from __future__ import annotations

import collections

from heartq.store.sql.fair import Share, allot


def _share(key: str, count: int, weight: float = 1.0, queue: str = "q", priority: int = 0) -> Share:
    return Share(queue, key, weight, [(f"{queue}/{key}/{n}", priority) for n in range(count)])


def _run(shares: list[Share], claims: int, limit: int) -> collections.Counter[str]:
    """`claims` claims of `limit` slots in turn, the times stored between them."""
    served: dict[tuple[str, str], float] = {}
    clocks: dict[str, float] = {}
    taken: collections.Counter[str] = collections.Counter()
    for _ in range(claims):
        fresh = [
            Share(s.queue, s.key, s.weight, s.jobs[taken[s.key] :][:limit])
            for s in shares
            if taken[s.key] < len(s.jobs)
        ]
        for s in fresh:
            s.served = served.get((s.queue, s.key))
        done = allot(fresh, clocks, limit)
        served.update(done.served)
        clocks.update(done.clocks)
        for job_id in done.ids:
            taken[job_id.split("/")[1]] += 1
    return taken


def test_claims_of_one_slot_take_the_keys_in_turn() -> None:
    taken = _run([_share("flood", 1000), *(_share(f"k{n}", 100) for n in range(4))], 50, 1)
    assert set(taken.values()) == {10}


def test_weights_hold_across_claims_of_any_size() -> None:
    for limit in (1, 4, 10):
        taken = _run([_share("heavy", 5000, 3.0), _share("light", 5000)], 400 // limit, limit)
        assert taken["heavy"] == 300 and taken["light"] == 100, (limit, taken)


def test_a_higher_priority_goes_first() -> None:
    done = allot([_share("a", 5), _share("b", 2, priority=1)], {}, 3)
    assert done.ids == ["q/b/0", "q/b/1", "q/a/0"]


def test_each_queue_keeps_its_own_clock() -> None:
    old = _share("a", 10, queue="busy")
    old.served = 1000.0
    new = _share("b", 10, queue="new")
    done = allot([old, new], {"busy": 1000.0}, 4)
    assert collections.Counter(i.split("/")[0] for i in done.ids) == {"busy": 2, "new": 2}
    assert done.clocks == {"busy": 1002.0, "new": 2.0}
