"""The chaos runner, long: minutes of faults per backend (`pytest -m soak`, `scripts/soak`).

Excluded from the default suite (`-m 'not soak'` in pyproject.toml). Settings from the
environment: `HEARTQ_SOAK_DURATION` (seconds of chaos per backend, default 600),
`HEARTQ_SOAK_WORKERS` (4), `HEARTQ_SOAK_SEED` (1), `HEARTQ_SOAK_JOBS` (default: 12 per
second of chaos), `HEARTQ_SOAK_REPORT_DIR` (write `chaos-<backend>.json` there).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.soak.chaos import run_chaos
from tests.soak.chaos_config import ChaosConfig
from tests.soak.chaos_report import format_report

DURATION = float(os.environ.get("HEARTQ_SOAK_DURATION", "600"))

pytestmark = [pytest.mark.soak, pytest.mark.timeout(int(DURATION * 1.5) + 300)]


def test_invariants_hold_under_long_chaos(backend: str) -> None:
    """PostgreSQL runs on a private cluster, which the `pg_restart` fault restarts."""
    config = ChaosConfig(
        backend=backend,
        duration=DURATION,
        workers=int(os.environ.get("HEARTQ_SOAK_WORKERS", "4")),
        jobs=int(os.environ.get("HEARTQ_SOAK_JOBS", str(int(DURATION * 12)))),
        seed=int(os.environ.get("HEARTQ_SOAK_SEED", "1")),
        drain_timeout=120.0,
        private_pg=backend == "postgres",
        verbose=False,
    )
    figures = run_chaos(config)
    report = format_report(figures)
    print(report)
    out = os.environ.get("HEARTQ_SOAK_REPORT_DIR")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        Path(out, f"chaos-{backend}.json").write_text(json.dumps(figures, indent=2) + "\n")
    assert figures["ok"], report
