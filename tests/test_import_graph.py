"""heartq's modules import each other without a cycle, counting every import the source
writes: at module level, inside a function (a deferred import), and under
`TYPE_CHECKING` (a cycle of types is still two modules that each need the other).

A cycle is how a layer starts leaning on the one above it (pipelines on the app's
private methods, issue 42); read from the source with `ast`, so the test imports
nothing and sees imports that never run here. Last, what does run: the modules the
command line's start loads, in a fresh interpreter.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"


def _modules(src: Path, package: str) -> dict[str, Path]:
    """Every module of `package` under `src` by dotted name (a package by its own name)."""
    found = {}
    for path in (src / package).rglob("*.py"):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imported(name: str, path: Path, modules: dict[str, Path]) -> Iterator[str]:
    """The modules of the package `name` imports, anywhere in its source. `from a import b` is
    module `a.b` when that is a module, else `a` (a name of `a`); `a`'s parent packages
    are not counted (every module would then import `heartq/__init__.py`)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                yield submodule if submodule in modules else base


def _graph(src: Path = SRC, package: str = "heartq") -> dict[str, set[str]]:
    modules = _modules(src, package)
    return {
        name: {
            imported
            for imported in _imported(name, path, modules)
            if imported in modules and imported != name
        }
        for name, path in modules.items()
    }


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_kind_of_import_makes_a_cycle(tmp_path: Path) -> None:
    """The reading itself, on a package written here: an import at module level, one
    deferred into a function, one under TYPE_CHECKING, relative or not, each closes a
    cycle (else a reading that missed them would pass on heartq)."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    sources = {
        "__init__.py": "",
        "a.py": "from pkg import b\n",
        "b.py": "def f():\n    from pkg.sub import c\n",
        "sub/__init__.py": "",
        "sub/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..d import D\n",
        "d.py": "import pkg.a\nD = 1\n",
        "alone.py": "from pkg import a\n",
    }
    for name, text in sources.items():
        (package / name).write_text(textwrap.dedent(text))
    graph = _graph(tmp_path, "pkg")
    assert _cycles(graph) == [["pkg.a", "pkg.b", "pkg.d", "pkg.sub.c"]]


def test_no_module_of_heartq_imports_itself_back() -> None:
    graph = _graph()
    cycles = _cycles(graph)
    described = [
        " <-> ".join(cycle)
        + ": "
        + ", ".join(f"{a} -> {b}" for a in cycle for b in sorted(graph[a]) if b in cycle)
        for cycle in cycles
    ]
    assert not cycles, "import cycles among heartq's modules:\n" + "\n".join(described)


SEAM = {"heartq.store.sql.base", "heartq.store.sql.statements"}
"""What a dialect's package may import of the shared SQL store: the seam's protocols, types
and helpers (`Dialect`, `Liveness`, `Step`, the migration helpers) and the names of the
statements. Never a role (`leases`, `keyed`, `reclaim`, ...): a dialect answers, the
shared code decides, and nothing calls back up across the seam."""
WIRING = "store"
"""...but for each backend's `store.py`, which builds `SqlStore` over the backend's parts
(down the seam, as `open_store` does)."""


def _crossings(graph: dict[str, set[str]]) -> list[str]:
    """Every import across the seam against its direction: a module of a dialect's package
    importing a module of `store/sql/` beyond the seam, or a module of `store/sql/`
    importing a dialect's package."""
    dialects = ("heartq.store.postgres", "heartq.store.sqlite")
    shared = "heartq.store.sql"
    found = []
    for module, imported in sorted(graph.items()):
        if module.startswith(dialects):
            allowed = SEAM | ({f"{shared}.store"} if module.endswith(f".{WIRING}") else set())
            found += [
                f"{module} -> {other}"
                for other in sorted(imported)
                if other.startswith(f"{shared}.") and other not in allowed
            ]
        elif module.startswith(f"{shared}.") or module == shared:
            backward = [other for other in sorted(imported) if other.startswith(dialects)]
            found += [f"{module} -> {other}" for other in backward]
    return found


def test_a_crossing_of_the_seam_is_found(tmp_path: Path) -> None:
    """The reading itself, on a package laid out as heartq's store is: a dialect importing
    a role (even deferred), and a role importing a dialect, are each found; the seam's own
    modules and the backend's wiring are not."""
    root = tmp_path / "heartq" / "store"
    for folder in ("sql", "postgres", "sqlite"):
        (root / folder).mkdir(parents=True)
        (root / folder / "__init__.py").write_text("")
    (root.parent / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    sources = {
        "sql/base.py": "",
        "sql/statements.py": "",
        "sql/keyed.py": "from heartq.store.sql import base\n",
        "sql/leases.py": "from heartq.store.sql.keyed import claim\n",
        "sql/store.py": "from heartq.store.sql import leases\n",
        "sql/reclaim.py": "def f():\n    from heartq.store.sqlite import liveness\n",
        "postgres/dialect.py": "def f():\n    from heartq.store.sql.keyed import claim\n",
        "postgres/store.py": "from heartq.store.sql.store import SqlStore\n",
        "sqlite/liveness.py": "from heartq.store.sql.base import Dialect\n",
        "sqlite/store.py": "from heartq.store.sql import store\n",
    }
    for name, text in sources.items():
        (root / name).write_text(text)
    assert _crossings(_graph(tmp_path)) == [
        "heartq.store.postgres.dialect -> heartq.store.sql.keyed",
        "heartq.store.sql.reclaim -> heartq.store.sqlite.liveness",
    ]


def test_no_dialect_calls_back_into_the_shared_store() -> None:
    """A dialect's package (`store/postgres/`, `store/sqlite/`) reaches nothing of
    `store/sql/` but the seam (`base.py`, `statements.py`), and the shared store imports no
    dialect: every dialect method is a leaf, the keyed claim's logic included
    (`store/sql/keyed.py`), so a claim's road runs one way, down."""
    crossings = _crossings(_graph())
    assert not crossings, "imports across the store's seam:\n" + "\n".join(crossings)


DEFERRED = ("heartq.app", "heartq.model", "heartq.worker", "asyncio", "cronsim", "rich")
"""What `heartq`'s start (`heartq.cli.main`, before a command is named) does not load: each
command loads what it uses, and a worker's or a command's start pays for nothing more
(`heartq/__init__.py` exports its names lazily; the errors and the store's interface
name the model in their annotations only)."""


def test_the_command_line_starts_without_what_its_commands_load() -> None:
    """In a fresh interpreter, as every `heartq` process starts."""
    probe = (
        "import sys, heartq.cli.main\n"
        f"print([m for m in sys.modules if m.startswith({DEFERRED!r})])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
