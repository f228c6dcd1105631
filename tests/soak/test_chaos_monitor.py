"""The chaos runner's I1 monitor (`chaos_workers.unwatched`) on made-up fleets: the zombie bound
counts from when another worker was up to reclaim. A worker launched but still starting
(seed 72: 7.8-8.9 s under a load of 13), one killed, exited or SIGSTOPped reclaims
nothing, so those spans are added to the bound; an up, running peer closes the gap."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

from tests.soak.chaos_workers import unwatched


def _proc(
    up_at: float | None,
    killed_at: float | None = None,
    freezes: tuple[tuple[float, float], ...] = (),
) -> Any:
    return SimpleNamespace(
        up_at=up_at,
        killed_at=killed_at,
        exited_at=None,
        read_id=lambda: None if up_at is None else "w",
        alive=lambda: killed_at is None,
        freezes=lambda: list(freezes),
    )


def _unwatched(procs: list[Any], dead: Any, since: float, now: float) -> float:
    return unwatched([dead, *procs], dead, since, now)


def test_a_peer_up_and_running_all_along_leaves_no_gap() -> None:
    dead = _proc(0.0, killed_at=20.0)
    assert _unwatched([_proc(5.0)], dead, 20.0, 30.0) == 0.0


def test_the_spans_without_a_peer_up_count() -> None:
    dead = _proc(0.0, killed_at=20.0)
    # one killed a second after the death, one up 7 s after it, one never up
    fleet = [_proc(10.0, killed_at=21.0), _proc(27.0), _proc(None)]
    assert math.isclose(_unwatched(fleet, dead, 20.0, 30.0), 6.0)
    # the one up later frozen for a second: a second more
    fleet[1] = _proc(27.0, freezes=((28.0, 29.0),))
    assert math.isclose(_unwatched(fleet, dead, 20.0, 30.0), 7.0)
    # frozen from before the death until after it: counted from its thaw
    fleet = [_proc(5.0, freezes=((18.0, 23.0),))]
    assert math.isclose(_unwatched(fleet, dead, 20.0, 30.0), 3.0)
