"""The documentation as a reader walks it: every relative link of README.md and docs/
(their pages, the design pages, the design notes) leads to a file that exists, and its
`#anchor` to a heading there; each design page (docs/design/) opens with what it answers
and stays short enough to read whole; DESIGN.md guides to every one of them; and
UPGRADING.md holds one section per schema version, newest first, the one place an
upgrade's notes live."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
DESIGN_PAGES = sorted((DOCS / "design").glob("*.md"))
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
MAX_DESIGN_LINES = 400
"""A design page past about 400 lines is two topics: split it, and say where in DESIGN.md."""

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def prose(text: str) -> str:
    """The text a reader follows links in: fenced blocks and inline code set aside."""
    return CODE.sub("", FENCE.sub("", text))


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings, as GitHub makes them (a repeated heading gets
    `-1`, `-2` ...)."""
    made: set[str] = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        heading = re.match(r"#{1,6} (.+)", line)
        if not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
        anchor, n = slug, 0
        while anchor in made:
            n += 1
            anchor = f"{slug}-{n}"
        made.add(anchor)
    return made


def test_every_relative_link_and_anchor_resolves() -> None:
    broken = []
    for page in PAGES:
        for target in LINK.findall(prose(page.read_text())):
            if re.match(r"[a-z]+:", target):
                continue  # http:, https:, mailto:
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(ROOT)}: ({target})"
            if not file.exists():
                broken.append(f"{where}: no such file")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file):
                broken.append(f"{where}: no such heading")
    assert broken == []


def test_each_design_page_says_what_it_answers_and_stays_short() -> None:
    assert len(DESIGN_PAGES) >= 8
    for page in DESIGN_PAGES:
        lines = page.read_text().splitlines()
        assert lines[0].startswith("# heartq design: "), page.name
        assert lines[1] == "" and lines[2].startswith("**What this page answers:** "), page.name
        assert lines[3] and lines[4] == "", f"{page.name}: two lines of what it answers"
        assert len(lines) <= MAX_DESIGN_LINES, f"{page.name}: {len(lines)} lines"


def test_design_md_is_the_guide_to_every_design_page() -> None:
    guide = (DOCS / "DESIGN.md").read_text()
    assert len(guide.splitlines()) <= 150
    for page in DESIGN_PAGES:
        assert f"](design/{page.name})" in guide, page.name
    headings = {
        line.lstrip("#").strip()
        for page in DESIGN_PAGES
        for line in FENCE.sub("", page.read_text()).splitlines()
        if line.startswith(("## ", "### "))
    }
    listed = set(re.findall(r"^\| (?:[^|:]+: )?([^|]+?) \| \[", guide, re.M))
    assert headings <= listed, headings - listed


def test_upgrading_has_one_section_per_schema_version_newest_first() -> None:
    upgrading = (DOCS / "UPGRADING.md").read_text()
    versions = [int(v) for v in re.findall(r"^## Schema v(\d+)\b", upgrading, re.M)]
    assert versions and versions == sorted(set(versions), reverse=True), versions
    operations = (DOCS / "OPERATIONS.md").read_text()
    assert "](UPGRADING.md" in operations
    assert not re.search(r"^#+ .*(Schema v\d|[Uu]pgrad)", operations, re.M)
