"""docs/examples/testing, the user's test suite of docs/TESTING.md, run as its user runs
it: `pytest` in a copy of the example (heartq's plugin loaded by its entry point), on the
run's first backend (`LAYER_BACKENDS`; PostgreSQL through `--heartq-url`): nothing in the
example depends on the backend, and the plugin's `--heartq-url` is tested on PostgreSQL in
tests/testing/test_plugin.py. And the page quotes the example verbatim."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import LAYER_BACKENDS
from tests.support import pytest_env

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "testing"
SNIPPET = re.compile(r"```(?:python|ini)\n# (docs/examples/\S+)\n(.*?)```", re.DOTALL)


@pytest.mark.long(12)
@pytest.mark.parametrize("database", LAYER_BACKENDS)
def test_the_example_suite_passes(
    database: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    workdir = tmp_path / "testing"
    shutil.copytree(EXAMPLE, workdir, ignore=shutil.ignore_patterns("__pycache__"))
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
    if database == "postgres":
        args += ["--heartq-url", request.getfixturevalue("pg_server_url")]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HEARTQ_", "PYTEST_"))}
    done = subprocess.run(
        args,
        cwd=workdir,
        env=pytest_env(env),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "7 passed" in done.stdout, done.stdout
    assert not (workdir / "heartq.db").exists(), "a test used the app's own queue"


def test_testing_doc_quotes_the_example_as_it_is() -> None:
    quoted = SNIPPET.findall((ROOT / "docs" / "TESTING.md").read_text())
    assert {path for path, _ in quoted} >= {
        "docs/examples/testing/pytest.ini",
        "docs/examples/testing/conftest.py",
        "docs/examples/testing/main.py",
        "docs/examples/testing/test_signups.py",
        "docs/examples/testing/test_without_pytest.py",
    }
    for path, code in quoted:
        assert code in (ROOT / path).read_text(), f"docs/TESTING.md quotes {path} wrongly"
