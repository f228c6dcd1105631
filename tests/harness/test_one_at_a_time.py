"""Tests marked `one_at_a_time(NAME)` never run at the same time, whichever of the test
command's xdist workers runs them (tests/conftest.py: a lock per name, held from a test's
setup to its teardown): the command `scripts/test` ends with, on `taking_turns.py`."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support import pytest_env, suite_command

ROOT = Path(__file__).resolve().parents[2]
SELECTION = "tests/harness/taking_turns.py"


@pytest.mark.heavy  # an inner run of the whole command: `scripts/test --heavy`
@pytest.mark.slow
def test_tests_of_one_name_take_turns_across_the_workers(tmp_path: Path) -> None:
    notes = tmp_path / "turns.jsonl"
    inner = ["-p", "no:cacheprovider", "--basetemp", str(tmp_path / "inner"), SELECTION]
    run = subprocess.run(
        [*suite_command(), *inner],
        cwd=ROOT,
        env=pytest_env(dict(os.environ, HQTEST_TURNS=str(notes))),
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    turns = [json.loads(line) for line in notes.read_text().splitlines()]
    in_turn = sorted((t for t in turns if "test_in_turn" in t["test"]), key=lambda t: t["start"])
    assert len(in_turn) == 6 and len(turns) == 12, turns
    # they ran in more than one process: what kept them apart is the lock, not xdist
    assert len({t["worker"] for t in in_turn}) > 1, in_turn
    for before, after in itertools.pairwise(in_turn):
        assert after["start"] >= before["end"], (before, after)
