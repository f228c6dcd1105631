"""Tests marked `long(SECONDS)` start first under xdist's work stealing (tests/long_first.py):
each xdist process puts them at the fronts of the shares xdist's work stealing first hands
out, which these tests hold xdist to."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
from xdist.scheduler import WorkStealingScheduling

from tests.long_first import ordered, shares


@dataclass(eq=False)
class Process:
    """What xdist's scheduler sees of a worker process: the tests it was handed."""

    handed: list[list[int]] = field(default_factory=list)
    shutting_down: bool = False
    gateway: SimpleNamespace = field(default_factory=lambda: SimpleNamespace(id="gw"))

    def send_runtest_some(self, indices: list[int]) -> None:
        self.handed.append(list(indices))

    def send_steal(self, indices: list[int]) -> None:
        pass

    def shutdown(self) -> None:
        self.shutting_down = True


class Options:
    def __init__(self, processes: int) -> None:
        self.processes = processes

    def getvalue(self, name: str) -> list[str]:
        assert name == "tx", name
        return ["popen"] * self.processes


@pytest.mark.parametrize(("total", "processes"), [(2455, 4), (10, 3), (7, 2), (4, 4)])
def test_work_stealing_first_hands_out_contiguous_shares_of_these_sizes(
    total: int, processes: int
) -> None:
    scheduler = WorkStealingScheduling(Options(processes))  # type: ignore[arg-type]
    workers = [Process() for _ in range(processes)]
    collection = [f"t{i}" for i in range(total)]
    for worker in workers:
        scheduler.add_node(worker)  # type: ignore[arg-type]
        scheduler.add_node_collection(worker, collection)  # type: ignore[arg-type]
    scheduler.schedule()
    first = [worker.handed[0] for worker in workers]
    assert [len(share) for share in first] == shares(total, processes)
    assert [i for share in first for i in share] == list(range(total))


@dataclass
class Item:
    name: str
    seconds: float | None = None
    together: str | None = None

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        if name != "long" or self.seconds is None:
            return None
        if self.together is not None:
            return pytest.mark.long(self.seconds, together=self.together).mark
        return pytest.mark.long(self.seconds).mark


def test_long_tests_lead_the_shares_longest_first_the_rest_in_place() -> None:
    items = [Item(f"t{i}") for i in range(20)]
    for place, seconds in [(3, 10), (5, 50), (11, 20), (12, 15), (17, 30), (19, 5)]:
        items[place].seconds = seconds
    order = [item.name for item in ordered(items, 2)]
    # Longest first, each to the share whose long tests add up to least so far (the first
    # on a tie): 50 | 30, then 20 to the second (50 | 50), 15 to the first (65 | 50), 10
    # and 5 to the second (65 | 65).
    rest = [f"t{i}" for i in (0, 1, 2, 4, 6, 7, 8, 9, 10, 13, 14, 15, 16, 18)]
    assert order == ["t5", "t12", *rest[:8], "t17", "t11", "t3", "t19", *rest[8:]]


def test_tests_marked_long_together_lead_a_share_as_one_block_in_their_order() -> None:
    """A block (a Django site's tests, say) is one long test of its SECONDS: it never
    spans two shares, its tests keep their order, and a block no share has room for stays
    in place."""
    items = [Item(f"t{i}") for i in range(20)]
    for place in (14, 15, 16, 17):
        items[place].seconds, items[place].together = 40, "site a"
    for place in (18, 19):
        items[place].seconds, items[place].together = 20, "site b"
    items[2].seconds = 30
    order = [item.name for item in ordered(items, 2)]
    # 40 to the first share, 30 to the second, 20 to the second (40 | 50).
    rest = [f"t{i}" for i in (0, 1, *range(3, 14))]
    assert order == ["t14", "t15", "t16", "t17", *rest[:6], "t2", "t18", "t19", *rest[6:]]
    huge = [Item(f"t{i}", 10, "huge" if i < 6 else None) for i in range(10)]
    # Shares of 5 and 5: the block of 6 stays in place, t6 to t9 lead the shares in turn.
    expected = [f"t{i}" for i in (6, 8, 0, 1, 2, 7, 9, 3, 4, 5)]
    assert [item.name for item in ordered(huge, 2)] == expected


def test_an_order_keeps_every_test_once_whatever_the_processes() -> None:
    items = [Item(f"t{i}", 1.0 if i % 3 == 0 else None) for i in range(10)]
    for processes in range(1, 12):
        order = ordered(items, processes)
        assert sorted(item.name for item in order) == sorted(item.name for item in items)
