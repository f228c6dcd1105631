"""The turns of a claim's slots (`heartq.store.sql.fair.allot`), as logic without a
database: lanes in rotation from a tier's cursor, quanta by weight, a turn's rest carried
from claim to claim, priorities, and the tiers of two queues side by side."""

from __future__ import annotations

import collections

from heartq.store.sql.fair import UNKEYED, Cursor, Lane, allot, rounds_for, start


def _lane(key: str, count: int, weight: float = 1.0, queue: str = "q", priority: int = 0,
          place: int = 0, continuing: int | None = None, first: int = 0,
          most: int | None = None) -> Lane:  # fmt: skip
    """A lane of `count` jobs, or of those from the `first` on, `most` of them (what a
    claim's window reads of it)."""
    last = count if most is None else min(count, first + most)
    jobs = [(f"{queue}/{key}/{n:04d}", float(n)) for n in range(first, last)]
    return Lane(queue, priority, key, place, weight, jobs, continuing)


def _run(lanes: dict[str, tuple[int, float]], claims: int, limit: int) -> collections.Counter[str]:
    """`claims` claims of `limit` slots of one tier whose lanes (key: jobs, weight) are
    put in rotation from the cursor each claim left, as the dialect's window does."""
    cursor: Cursor | None = None
    taken: collections.Counter[str] = collections.Counter()
    for _ in range(claims):
        at, incl = start(cursor)
        keys = sorted(k for k, (n, _) in lanes.items() if taken[k] < n)
        order = [k for k in keys if k > at or (incl and k == at)]
        order += [k for k in keys if k < at or (not incl and k == at)]
        window = []
        for place, key in enumerate(order[:limit]):
            count, weight = lanes[key]
            lane = _lane(key, count, weight, place=place, first=taken[key], most=limit)
            if cursor is not None and cursor.key == key and cursor.remaining > 0:
                lane.continuing = cursor.remaining
            window.append(lane)
        done = allot(window, {("q", 0): cursor}, limit)
        cursor = done.cursors.get(("q", 0), cursor)
        for job_id in done.ids:
            taken[job_id.split("/")[1]] += 1
    return taken


def test_claims_of_one_slot_take_the_keys_in_turn() -> None:
    lanes = {"flood": (1000, 1.0), **{f"k{n}": (100, 1.0) for n in range(4)}}
    assert set(_run(lanes, 50, 1).values()) == {10}


def test_more_keys_than_slots_each_take_a_turn_before_any_takes_two() -> None:
    lanes = {f"k{n:02d}": (3, 1.0) for n in range(30)}
    assert max(_run(lanes, 7, 4).values()) == 1  # 28 slots over 30 keys
    taken = _run(lanes, 10, 3)
    assert set(taken.values()) == {1}


def test_weights_hold_across_claims_of_any_size() -> None:
    for limit in (1, 4, 10):
        taken = _run({"heavy": (5000, 3.0), "light": (5000, 1.0)}, 400 // limit, limit)
        assert taken["heavy"] == 300 and taken["light"] == 100, (limit, taken)


def test_a_fractional_weight_is_a_quantum_of_one() -> None:
    taken = _run({"half": (100, 0.5), "one": (100, 1.0), "two": (100, 2.4)}, 40, 1)
    assert taken == {"half": 10, "one": 10, "two": 20}


def test_a_higher_priority_goes_first() -> None:
    done = allot([_lane("a", 5), _lane("b", 2, priority=1)], {}, 3)
    assert done.ids == ["q/b/0000", "q/b/0001", "q/a/0000"]


def test_rounds_before_places_and_the_cursor_where_the_slots_ran_out() -> None:
    lanes = [_lane("a", 10, 2.0, place=0), _lane("b", 10, place=1), _lane("c", 10, place=2)]
    done = allot(lanes, {("q", 0): None}, 5)
    # round 1: a, a, b, c; round 2: a (its first of two)
    assert done.ids == ["q/a/0000", "q/a/0001", "q/b/0000", "q/c/0000", "q/a/0002"]
    assert done.cursors == {("q", 0): Cursor("a", 1)}


def test_the_lane_continuing_its_turn_takes_what_the_turn_has_left() -> None:
    a = _lane("a", 10, 3.0, place=0, continuing=1)
    lanes = [a, _lane("b", 10, place=1)]
    done = allot(lanes, {("q", 0): Cursor("a", 1)}, 2)
    assert done.ids == ["q/a/0000", "q/b/0000"]
    assert done.cursors == {("q", 0): Cursor("b", 0)}
    # the turn's earlier part counts as taken: a continuing lane stopped in round 1
    done = allot([_lane("a", 10, 3.0, place=0, continuing=2)], {("q", 0): Cursor("a", 2)}, 1)
    assert done.cursors == {("q", 0): Cursor("a", 1)}


def test_tiers_of_two_queues_go_side_by_side_by_place() -> None:
    lanes = [_lane("a", 5, queue="x", place=0), _lane("b", 5, queue="x", place=1),
             _lane("c", 5, queue="y", place=0)]  # fmt: skip
    done = allot(lanes, {}, 3)
    assert [i.split("/")[1] for i in done.ids][:2] == ["a", "c"]
    assert done.cursors == {("x", 0): Cursor("b", 0), ("y", 0): Cursor("c", 0)}


def test_a_tier_of_jobs_without_a_key_keeps_its_cursor_unwritten() -> None:
    done = allot([_lane(UNKEYED, 5)], {("q", 0): Cursor(UNKEYED, 0)}, 3)
    assert len(done.ids) == 3 and done.cursors == {}
    done = allot([_lane(UNKEYED, 5)], {("q", 0): None}, 3)
    assert done.cursors == {("q", 0): Cursor(UNKEYED, 0)}


def test_the_rounds_that_fill_the_slots() -> None:
    lanes = [_lane("a", 0, 3.0), _lane("b", 0, continuing=1), _lane("c", 0)]
    assert rounds_for(lanes, 5) == 1
    assert rounds_for(lanes, 6) == 2
    assert rounds_for(lanes, 10) == 2
    assert rounds_for(lanes, 11) == 3
