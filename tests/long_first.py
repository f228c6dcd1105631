"""Long tests start first: a run ends when its last test does.

Under xdist's work stealing (`scripts/test`: `--dist worksteal`) each process is first
handed a contiguous share of the collection, runs it from its front, and a process that
runs out takes the back half of the largest share left. A test of 50 s that its share
reaches late makes the run up to 50 s longer, the other processes idle meanwhile (the plan
census, in tests/plans, sat two thirds of the way into its share).

A test marked `long(SECONDS)` (about what it takes in a full run on a quiet machine: only
the tests' order is read from it) is moved to the front of a share: the longest first,
each to the share whose long tests add up to least so far (the longest-processing-time
rule). Every other test keeps its place in the collection order, so a module's tests stay
together in one share (its module-scoped fixtures made once). Each xdist process orders its
own collection the same way (xdist checks they are the same), knowing the run's number of
processes; nothing changes outside xdist or under another `--dist`.

Tests that share a costly module-scoped fixture value (a Django site: its processes and
migrations, 2.5-6 s) are marked `long(SECONDS, together=NAME)`, SECONDS being what the
group takes as a whole: they lead a share as one block, in collection order. Left where
the collection put them (tests/with_django, the back of the last share) the steals took
them first, a tail at a time, and a site cut by a steal was set up again in the process
that took the rest: about twice a site a run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

import pytest


class Marked(Protocol):
    def get_closest_marker(self, name: str) -> pytest.Mark | None: ...


T = TypeVar("T", bound=Marked)


def shares(total: int, processes: int) -> list[int]:
    """The sizes of the contiguous shares xdist's work stealing first hands `processes`
    processes out of `total` tests, in order (`WorkStealingScheduling.check_schedule`:
    each takes what is left divided by the processes left; tests/harness/test_long_first.py
    holds xdist to it)."""
    sizes = []
    for i in range(processes):
        sizes.append(total // (processes - i))
        total -= sizes[-1]
    return sizes


def seconds(item: Marked) -> float | None:
    """The seconds a test's `long` mark gives, or None if it has none."""
    mark = item.get_closest_marker("long")
    if mark is None:
        return None
    return float(mark.args[0] if mark.args else mark.kwargs["seconds"])


def together(item: Marked) -> str | None:
    """The name of the block a test's `long` mark puts it in (`together=NAME`), or None."""
    mark = item.get_closest_marker("long")
    return None if mark is None else mark.kwargs.get("together")


def ordered(items: Sequence[T], processes: int) -> list[T]:
    """`items` in the order that starts each `long` test (or block of tests marked long
    together) at the front of a share."""
    sizes = shares(len(items), processes)
    blocks: dict[object, list[int]] = {}
    timed: dict[object, float] = {}
    for place, item in enumerate(items):
        taken = seconds(item)
        if taken is not None:
            key = together(item) or place
            blocks.setdefault(key, []).append(place)
            timed[key] = taken
    longest = sorted(blocks, key=lambda key: (-timed[key], blocks[key][0]))
    heads: list[list[int]] = [[] for _ in sizes]
    load = [0.0] * len(sizes)
    for key in longest:
        block = blocks[key]
        room = [i for i, size in enumerate(sizes) if len(heads[i]) + len(block) <= size]
        if not room:
            continue  # a block no share can hold: left in place
        share = min(room, key=lambda i: (load[i], i))
        heads[share] += block
        load[share] += timed[key]
    placed = {place for head in heads for place in head}
    rest = iter(place for place in range(len(items)) if place not in placed)
    order: list[int] = []
    for head, size in zip(heads, sizes, strict=True):
        order += head
        order += [next(rest) for _ in range(size - len(head))]
    return [items[place] for place in order]
