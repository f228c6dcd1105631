"""Every `HEARTQ_*` variable heartq reads is in docs/INTERFACE.md's table of the
environment (the one list: the design pages and OPERATIONS point there), and every variable the
pages name exists: read by heartq, or by its own test suite and benchmarks, or click's
shell completion (`_HEARTQ_COMPLETE`). A page that names one heartq does not read (a
setting without a variable) sends its reader after nothing."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUOTED = re.compile(r"""["'](HEARTQ_[A-Z_]+)["']""")
NAMED = re.compile(r"\b_?HEARTQ_[A-Z_]+\b")
PAGES = sorted(
    [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "docs" / "design").glob("*.md")],
    key=str,
)
"""The pages that describe heartq as it is (the history pages record what was)."""


def _quoted(where: Path) -> set[str]:
    return {
        name for path in where.rglob("*.py") for name in QUOTED.findall(path.read_text())
    }


def _environment_table() -> list[str]:
    text = (ROOT / "docs" / "INTERFACE.md").read_text()
    section = text.split("\n## Environment\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `(HEARTQ_[A-Z_]+)` \|", section, re.M)


def test_interface_lists_every_variable_heartq_reads() -> None:
    read = _quoted(ROOT / "src" / "heartq")
    listed = _environment_table()
    assert len(read) >= 15
    assert sorted(listed) == sorted(read)
    assert len(listed) == len(set(listed))


def test_the_pages_name_only_variables_that_exist() -> None:
    known = _quoted(ROOT / "src" / "heartq") | _quoted(ROOT / "tests") | _quoted(ROOT / "bench")
    known.add("_HEARTQ_COMPLETE")  # click's shell completion: `_HEARTQ_COMPLETE=bash_source`
    named = {
        page.name: sorted(set(NAMED.findall(page.read_text())) - known)
        for page in PAGES
        if not page.name.endswith("-HISTORY.md")
    }
    assert {page: names for page, names in named.items() if names} == {}
