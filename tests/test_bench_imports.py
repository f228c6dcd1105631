"""The benchmarks import nothing of the tests, and `python -m bench --help` says what to
install.

`python -m bench` must run where only heartq and its postgres extra are installed: the
test harness needs the dev extra (psutil, for one), so a bench module importing a test
module fails there (issue 41: `bench/fleet.py` imported `tests/pg_harness.py`). The
private servers both use live in `bench/servers/`. Each check runs in a fresh
interpreter whose import system refuses `tests` and `tests.*`: this process has them
imported already, and the dev environment has what they need.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from bench import environment

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
PEERS = {pin.split("==")[0].split("[")[0] for pin in environment.PEERS}
"""The peers' packages: the modules that import them run with the peers' interpreter
(`.bench-venv`: the contenders, the charts), so the dev environment may lack them."""

REFUSE_TESTS = """
import sys

class RefuseTests:
    def find_spec(self, name, path=None, target=None):
        if name == "tests" or name.startswith("tests."):
            raise ModuleNotFoundError(f"a benchmark imported {name}", name=name)
        return None

sys.meta_path.insert(0, RefuseTests())
"""


def run_without_tests(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh interpreter at the repository's root, `tests` not importable."""
    return subprocess.run(
        [sys.executable, "-c", REFUSE_TESTS + code, *args],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def bench_modules() -> list[str]:
    return sorted(
        ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for path in BENCH.rglob("*.py")
    )


def test_every_bench_module_imports_without_the_tests() -> None:
    modules = bench_modules()
    assert {"bench.fleet", "bench.servers.postgres", "bench.transport_latency"} <= set(modules)
    code = f"""
import importlib, json
sys.path.append({str(BENCH / "contenders")!r})  # the contenders import their `common`
missing = {{}}
for name in {modules!r}:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as error:
        missing[name] = error.name
print(json.dumps(missing))
"""
    done = run_without_tests(code)
    assert done.returncode == 0, done.stderr
    missing = json.loads(done.stdout)
    assert {name: what for name, what in missing.items() if what.split(".")[0] not in PEERS} == {}


def test_no_bench_module_imports_the_tests_even_late() -> None:
    """Imports inside functions too (`bench/recovery.py --pooler` took PgBouncer from the
    tests' harness), which importing the module does not reach."""
    found = []
    for path in sorted(BENCH.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            found += [
                f"{path.relative_to(ROOT)}:{node.lineno} imports {name}"
                for name in names
                if name == "tests" or name.startswith("tests.")
            ]
    assert found == []


def test_bench_help_runs_without_the_tests_and_says_what_to_install() -> None:
    done = run_without_tests(
        "import runpy; runpy.run_module('bench', run_name='__main__', alter_sys=True)", "--help"
    )
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "pip install -e '.[postgres]'" in text
    assert ".bench-venv" in text and "bench/environment.py" in text
    assert all(peer in text for peer in ("pgqueuer", "procrastinate", "huey", "rq", "matplotlib"))
