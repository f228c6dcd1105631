"""The selection of the inner test run that `test_one_at_a_time.py` starts, never collected
by the suite itself (not a `test_*.py` file): six tests marked `one_at_a_time("turns")`
and six free ones, each writing down (a JSON line in the file `HQTEST_TURNS` names) which
xdist worker ran it, and from when to when."""

from __future__ import annotations

import json
import os
import time

import pytest

HOLD = 0.4
"""Seconds each test takes: long enough for tests on other workers to overlap it, were
they free to."""


def note_turn(request: pytest.FixtureRequest) -> None:
    start = time.time()
    time.sleep(HOLD)
    line = {
        "test": request.node.nodeid,
        "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
        "start": start,
        "end": time.time(),
    }
    with open(os.environ["HQTEST_TURNS"], "a") as notes:
        notes.write(json.dumps(line) + "\n")


@pytest.mark.one_at_a_time("turns")
@pytest.mark.parametrize("n", range(6))
def test_in_turn(n: int, request: pytest.FixtureRequest) -> None:
    note_turn(request)


@pytest.mark.parametrize("n", range(6))
def test_free(n: int, request: pytest.FixtureRequest) -> None:
    note_turn(request)
