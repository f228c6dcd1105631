"""The chaos runner, short: ~20 s of random faults per backend, every invariant checked.

Real worker processes (process, thread and async pools) under SIGKILL, SIGSTOP beyond the
lease, SIGTERM, killed child processes, operator cancels and, on PostgreSQL, terminated
database sessions, the server restarted (a private cluster of the run's own) and its
xmin horizon held by another session's idle REPEATABLE READ transaction; then the
queue drains and docs/design/protocol.md's I1-I6 are checked against the database, and every
succeeded job's effect (a ledger row written in its completing transaction) is there
exactly once (see `tests/soak/chaos.py`). The seed is fixed, so the fault schedule is the same
on every run; the timing is not, and the invariants must hold whatever it is.

In the heavy tier, outside the default suite: `scripts/test --heavy` (or `pytest -m heavy
tests/soak/test_chaos_short.py`). The long version is `scripts/soak` (or `pytest -m soak
tests/soak`).
"""

from __future__ import annotations

import os

import pytest

from tests.soak.chaos import run_chaos
from tests.soak.chaos_config import ChaosConfig
from tests.soak.chaos_report import format_report

pytestmark = [pytest.mark.heavy, pytest.mark.slow, pytest.mark.timeout(150)]

SHORT = ChaosConfig(
    duration=float(os.environ.get("HEARTQ_CHAOS_SHORT_DURATION", "20")),
    workers=3,
    jobs=240,
    seed=20240611,
    prefetch=int(os.environ.get("HEARTQ_CHAOS_PREFETCH", "0")),  # claim ahead (--prefetch)
    drain_timeout=45.0,
    verbose=False,
)


def test_invariants_hold_under_chaos(backend: str) -> None:
    """`backend`: every backend of tests/conftest.py (HEARTQ_TEST_BACKENDS narrows it).
    PostgreSQL runs on a private cluster, which the `pg_restart` fault restarts."""
    private = backend == "postgres"
    config = ChaosConfig(**{**SHORT.__dict__, "backend": backend, "private_pg": private})
    figures = run_chaos(config)
    report = format_report(figures)
    print(report)
    assert figures["ok"], report
    # The run really was chaotic, and the mechanisms under test really ran.
    faults = figures["faults"]
    assert faults["sigkill"] + faults["sigstop"] + faults["sigterm"] >= 5, report
    reclaims = figures["reclaims_by_detected_by"]
    assert reclaims.get("child_exit", 0) >= 1, report
    assert figures["statuses"].get("succeeded", 0) > figures["jobs"] // 2, report
    # Effects exactly once: one ledger row per succeeded job (checked by the runner).
    ledger = figures["ledger"]
    assert ledger["duplicates"] == 0, report
    assert ledger["jobs_with_effect"] == ledger["succeeded_jobs_of_ledger_kinds"] > 0, report
    # Result-passing steps were held to the plan's values, and a dead root was replayed.
    assert figures["result_chains"].get("steps_checked", 0) > 0, report
    # Members and steps handed their results to their commit (chaos_commits)
    assert figures["after_commit"].get("succeeded_handed", 0) > 0, report
    assert figures["replays"].get("replayed", 0) >= 1, report
    # Fairness keys rode along, and each key's order was checked (without claims ahead)
    fair = figures["fair_keys"]
    assert fair["jobs"] > 0, report
    assert fair["checked"] == (not config.prefetch) and not fair.get("out_of_order"), report
    if private:
        assert faults["pg_restart"] >= 1, report
        assert faults["horizon"] >= 1, report
