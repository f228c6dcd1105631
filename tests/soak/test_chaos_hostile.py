"""The chaos runner's hostile family, short: hostile task code (`--hostile`, tests/soak/
chaos_hostile.py) mixed with the ordinary jobs on the thread, async and process pools,
under the `process` family's faults, on each backend.

The run checks everything itself (I1-I6, effects exactly once, and the hostile checks: each
hostile attempt ends as its case and pool give, nothing stuck, no slot leaked, no worker
exiting on its own or stopping to claim, no release uncounted beyond the policy); here:
that the hostile jobs really reached every pool and every case ran. The 10-minute runs
are in docs/RELIABILITY.md ("Hostile task code in the chaos runner").
"""

from __future__ import annotations

import pytest

from tests.soak.chaos import run_chaos
from tests.soak.chaos_config import ChaosConfig
from tests.soak.chaos_hostile import CASE_WEIGHTS
from tests.soak.chaos_report import format_report

# About 45 s a backend: in the soak tier with the other families (`pytest -m soak`).
pytestmark = [pytest.mark.slow, pytest.mark.soak, pytest.mark.timeout(240)]


def test_hostile_task_code_under_chaos(backend: str) -> None:
    private = backend == "postgres"
    config = ChaosConfig(
        backend=backend,
        private_pg=private,
        duration=30.0,
        workers=3,
        jobs=240,
        seed=20261130,  # a plan that draws every case at least three times
        hostile=0.4,
        drain_timeout=60.0,
        verbose=False,
    )
    figures = run_chaos(config)
    report = format_report(figures)
    print(report)  # shown with -rP
    assert figures["ok"], report
    hostile = figures["hostile"]
    assert hostile["stuck"] == 0 and hostile["slots_leaked"] == 0, report
    assert hostile["probe"]["workers"] == 3, report  # one of each pool filled every slot
    assert set(hostile["executions_by_pool"]) == {"thread", "async", "process"}, report
    ran = {case for case, parts in hostile["by_case"].items() if set(parts) - {"jobs"}}
    assert ran == set(CASE_WEIGHTS), report  # every case ran somewhere
