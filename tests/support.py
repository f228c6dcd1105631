"""Helpers shared by the test suites (importable as `tests.support`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from bench.servers import free_port as free_port  # the tests' servers' ports too
from tests import leftovers


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    """Poll `predicate` until it returns something truthy, or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


def pytest_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env`, for a pytest run a test starts (a user's suite, or this one on a selection):
    Python's bytecode and pytest's assertion-rewritten modules cached in this run's
    scratch directory (`PYTHONPYCACHEPREFIX`), never beside the sources. Under
    `PYTHONDONTWRITEBYTECODE` (set on some machines), every such run compiled, and
    rewrote the asserts of, each plugin it loads (hypothesis, heartq itself, xdist) from
    source: 1-2 s of a core per process, 5-20 s per run on a busy 2-core machine."""
    cached = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cached["PYTHONPYCACHEPREFIX"] = str(leftovers.scratch_dir() / "pycache")
    return cached
