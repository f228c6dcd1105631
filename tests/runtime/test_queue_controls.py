"""The worker's side of an operator's queue controls (`heartq.worker.controls`) on a
real queue: which claims a worker makes for its queues, and that a claim never trusts
an answer read too long ago (a worker frozen past a pause reads again before it claims).
Whole workers obeying them: tests/integration/test_queue_controls.py."""

from __future__ import annotations

import heartq
from heartq.worker.controls import ClaimGroup, QueueControls


def _controls(app: heartq.App, interval: float) -> QueueControls:
    woken: list[bool] = []
    controls = QueueControls(
        app.store,
        ("a", "b", "c"),
        app.events,
        "w1",
        interval=interval,
        wake=lambda: woken.append(True),
    )
    controls.refresh()
    return controls


def test_a_claim_names_open_queues_together_and_each_capped_one_alone(app: heartq.App) -> None:
    controls = _controls(app, interval=60)
    assert controls.open(("a", "b", "c"))
    assert controls.plan(("a", "b", "c"), []) == [ClaimGroup(("a", "b", "c"), None)]
    app.pause_queue("a")
    app.scale_queue("c", 2)
    controls.refresh()
    assert not controls.open(("a", "b", "c")) and controls.open(("b",))
    assert controls.plan(("a", "b", "c"), ["c", "b"]) == [
        ClaimGroup(("b",), None),
        ClaimGroup(("c",), 1),
    ]
    assert controls.plan(("a", "b", "c"), ["c", "c"]) == [ClaimGroup(("b",), None)]
    app.scale_queue("b", 0)
    controls.refresh()
    assert controls.plan(("a", "b"), []) == []
    assert controls.held_back("c") and controls.held_back("a") and controls.held_back("b")


def test_a_claim_reads_again_an_answer_older_than_a_few_intervals(app: heartq.App) -> None:
    fresh = _controls(app, interval=60)
    stale = _controls(app, interval=0)  # every answer is already too old
    app.pause_queue("b")
    assert fresh.fresh() and fresh.open(("b",))  # read a moment ago: trusted as it is
    assert stale.fresh() and not stale.open(("b",))  # read again before the claim
