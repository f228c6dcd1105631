"""A user's project and a real `pytest` run on it, in a subprocess: how the tests of
the pytest plugin and of the assertion helpers' tracebacks meet heartq.testing as a
user's suite does (the plugin loaded by the package's entry point)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support import pytest_env

TASKS = """
import heartq

app = heartq.App()


@app.task(max_retries=1)
def greet(ctx: heartq.JobContext, name: str) -> str:
    if name == "bad":
        raise ValueError("bad name")
    return f"hello {name}"
"""


def make_project(tmp_path: Path, tests: str, ini: str = "heartq_app = tasks:app") -> Path:
    """`project/` under `tmp_path`: `pytest.ini` with `ini`, `tasks.py` (`TASKS`) and
    `test_tasks.py` holding `tests` (dedented)."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "pytest.ini").write_text(f"[pytest]\n{ini}\n")
    (project / "tasks.py").write_text(TASKS)
    (project / "test_tasks.py").write_text(textwrap.dedent(tests))
    return project


def run_pytest(
    project: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`python -m pytest ARGS` in `project`, with none of this run's heartq settings."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HEARTQ_", "PYTEST_"))}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
        cwd=project,
        env=pytest_env({**clean, "PYTHONPATH": str(project), **(env or {})}),
        capture_output=True,
        text=True,
        timeout=300,
    )
