"""Failover, short: the primary dies mid-run and its standby is promoted under three real
workers and an enqueuer on a multi-host URL (`tests/soak/failover.py`), once with
synchronous and once with asynchronous replication, about 30 s each.

The runner checks what the promoted standby holds (I1-I6, effects exactly once, no live
worker taken for dead, every worker carried on, `heartq` commands and NOTIFY work on the
new primary); synchronous, also that every acknowledged enqueue is there and succeeded,
no acknowledged completion was lost, and no attempt was counted for the failover (every
job has `max_retries=0`). Here: that the run really did what it says (the outage cut
attempts short, the cut lost commits when asynchronous), and the figures, printed.

In the heavy tier, outside the default suite: `scripts/test --heavy` (or `pytest -m heavy
tests/soak/test_failover_short.py`). The longer measurement, at heartq's default settings
and over several failovers, is `python -m tests.soak.failover` (docs/RELIABILITY.md,
"Failover").
"""

from __future__ import annotations

import pytest

from tests.conftest import BACKENDS
from tests.soak.failover import FAST, FailoverConfig, run_failover
from tests.soak.failover_checks import format_report

pytestmark = [
    pytest.mark.heavy,
    pytest.mark.slow,
    pytest.mark.timeout(240),
    pytest.mark.skipif("postgres" not in BACKENDS, reason="PostgreSQL only"),
]


def test_synchronous_replication_loses_nothing_acknowledged_and_spends_no_retry() -> None:
    """Attempts running when the primary dies (3 s ones through a 4 s outage, past their
    worker's 3.3 s trust window) end `interrupted`, not counted: every job, all with
    `max_retries=0`, succeeds."""
    figures = run_failover(FailoverConfig(synchronous=True, settings=dict(FAST), verbose=False))
    report = format_report(figures)
    print(report)  # shown with -rP
    assert figures["ok"], report
    assert figures["statuses"] == {"succeeded": figures["jobs"]}, report
    assert set(figures["executions"]) <= {"succeeded", "interrupted"}, report
    assert figures["executions"].get("interrupted", 0) >= 1, report  # the outage was felt
    assert figures["enqueues"]["failed"] >= 1, report  # by the enqueuer too
    assert figures["completions_acknowledged"] > 0 and not figures["completions_lost"], report
    (failover,) = figures["failovers"]
    assert len(failover["every_worker_first_claim"]) == 3, report
    assert figures["wake_after_failover"]["claimed_after"] < 10.0, report  # poll: 30 s


def test_asynchronous_replication_loses_recent_commits_and_keeps_the_invariants() -> None:
    """With the standby cut off for 1 s before the primary dies, what was committed in
    that second is gone: acknowledged enqueues, and completions (their jobs run again, or
    are reclaimed when their lease runs out); what survived keeps every invariant."""
    figures = run_failover(FailoverConfig(synchronous=False, settings=dict(FAST), verbose=False))
    report = format_report(figures)
    print(report)
    assert figures["ok"], report
    assert figures["enqueues"]["acknowledged_lost"] >= 1, report
    assert sum(figures["completions_lost"].values()) >= 1, report
