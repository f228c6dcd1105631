"""Helpers shared by the test suites (importable as `tests.support`)."""

from __future__ import annotations

import os
import shlex
import shutil
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import MappingProxyType
from typing import Final, TypeVar

import pytest

from bench.servers import free_port as free_port  # the tests' servers' ports too
from heartq.config import env_variables
from heartq.store import Store, open_store
from tests import leftovers

DEPLOYMENT_MIGRATION = 9
"""The migration that writes the deployment id (`0009_deployment.sql`, on both backends):
run again on each copy of a migrated template (`tests/pg_template.py`,
`tests/sqlite_template.py`), so that every copy names a deployment of its own, as every
migrated schema does."""

IMPORT_EVERY_COMMAND = (
    "import click\n"
    "from heartq.cli.main import cli\n"
    "_ctx = click.Context(cli)\n"
    "for _name in cli.list_commands(_ctx):\n"
    "    cli.get_command(_ctx, _name)\n"
)
"""Python source that imports every `heartq` command's module (each loads when named):
for a subprocess that checks what the whole command line imports."""

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[1]
"""The repository."""

FAST: Final[Mapping[str, float]] = MappingProxyType(
    {
        "heartbeat_interval": 0.2,
        "lease": 0.6,
        "reclaim_interval": 0.3,
        "liveness_interval": 0.2,
        "poll_interval": 0.05,
    }
)
"""The suites' sub-second protocol settings, as `Worker`/`App` keyword arguments (for a
`heartq worker` process: `worker_flags`, `worker_argv`, `worker_env`): a 0.5 s trust
window, a gone worker found within ~0.2 s, an idle worker looking every 50 ms. A test
that needs another value says which and why with `fast(...)`."""

STEADY: Final[Mapping[str, float]] = MappingProxyType({**FAST, "lease": 4.0})
"""FAST, but a 4 s lease (so a 4 s stale threshold and a 3.3 s trust window), for tests that
count executions or attempts without being about lease timing: on a loaded 2-core machine a
0.2 s heartbeat is sometimes half a second late, and with FAST's 0.6 s lease a worker is then
judged stale, or fences itself, and its job runs again (correct at-least-once behaviour, but
not what such a test counts). Cancels, progress and wake-ups still travel at FAST's pace, and
a killed worker is still found at once through its liveness lock."""


THOROUGH: Final = os.environ.get("HEARTQ_THOROUGH", "") not in ("", "0")
"""`HEARTQ_THOROUGH=1`: the long variants of the suite's property tests (docs/TESTING.md,
"heartq's own suite"), more examples each than the default run's (`examples`)."""


def examples(default: int, thorough: int) -> int:
    """A property test's count of examples: `default` in the default run, `thorough` under
    `HEARTQ_THOROUGH=1`."""
    return thorough if THOROUGH else default


def fast(**changes: float | None) -> dict[str, float]:
    """FAST with `changes` (a setting changed to None is left to heartq's default)."""
    merged = {**FAST, **changes}
    return {name: value for name, value in merged.items() if value is not None}


def worker_flags(settings: Mapping[str, float]) -> dict[str, str]:
    """`settings` as `heartq worker` options (`--lease`: `"0.6"`), the way its command
    line names them (`heartq.cli.worker_cmd`: dashes for underscores)."""
    return {f"--{name.replace('_', '-')}": f"{value:g}" for name, value in settings.items()}


def worker_argv(settings: Mapping[str, float]) -> list[str]:
    """`settings` as `heartq worker` arguments: `["--lease", "0.6", ...]`."""
    return [word for option in worker_flags(settings).items() for word in option]


def worker_env(settings: Mapping[str, float]) -> dict[str, str]:
    """Those of `settings` that have a `HEARTQ_*` variable, as variables (for a worker
    started by a framework's command, which takes no heartq options); the others (the
    poll and liveness intervals have none) stay at their defaults."""
    variables = env_variables()
    return {variables[k]: f"{v:g}" for k, v in settings.items() if k in variables}


@contextmanager
def opened(store: str | Store) -> Iterator[Store]:
    """A store (one opened for the URL `store`), its link closed when the block ends."""
    made = open_store(store) if isinstance(store, str) else store
    try:
        yield made
    finally:
        made.link.close()


def wait_for(
    predicate: Callable[[], T | None],
    timeout: float = 10.0,
    what: str = "condition",
    *,
    diagnostics: Callable[[], str] | None = None,
    interval: float = 0.01,
) -> T:
    """Poll `predicate` every `interval` seconds until it returns something truthy, which
    is returned; fail after `timeout` seconds, with `diagnostics()` (what the test's
    processes said, say) appended to the message."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            message = f"timed out after {timeout:g} s waiting for {what}"
            if diagnostics is not None:
                message += "\n" + diagnostics()
            raise AssertionError(message)
        time.sleep(interval)


def sqlite_write_lock_free(path: str | Path, timeout: float) -> bool:
    """True if a write transaction on the SQLite database at `path` can begin within
    `timeout` seconds (no other connection holds its write lock)."""
    conn = sqlite3.connect(path, timeout=timeout, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()


def suite_command() -> list[str]:
    """The pytest command `scripts/test` runs (its last line, `exec .venv/bin/pytest ARGS
    "$@"`), for this interpreter: for a test of the command itself, on a selection."""
    last = (ROOT / "scripts" / "test").read_text().strip().splitlines()[-1]
    words = shlex.split(last)
    assert words[:2] == ["exec", ".venv/bin/pytest"] and words[-1] == "$@", last
    return [sys.executable, "-m", "pytest", *words[2:-1]]


def pytest_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env`, for a pytest run a test starts (a user's suite, or this one on a selection):
    Python's bytecode and pytest's assertion-rewritten modules cached in the cache `env`
    names already (`PYTHONPYCACHEPREFIX`: `scripts/test` gives `.venv/pycache`, which
    pip's install filled with every dependency's bytecode), else in this run's scratch
    directory; never beside the sources. Under `PYTHONDONTWRITEBYTECODE` (set on some
    machines), every such run compiled, and rewrote the asserts of, each plugin it loads
    (hypothesis, heartq itself, xdist) from source: 1-2 s of a core per process, 5-20 s
    per run on a busy 2-core machine."""
    cached = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if not cached.get("PYTHONPYCACHEPREFIX"):
        cached["PYTHONPYCACHEPREFIX"] = str(leftovers.scratch_dir() / "pycache")
    return cached


def without_dac_override() -> list[str]:
    """The command that runs a process as root without the capabilities that let root
    ignore file modes (so a file's `chmod 0444` holds for it); skips the test unless it
    runs as root with `setpriv`."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv")
    caps = "-dac_override,-dac_read_search"
    return [setpriv, "--inh-caps", caps, "--bounding-set", caps]
