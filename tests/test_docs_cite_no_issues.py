"""The pages that describe heartq as it is (README.md, docs/*.md and docs/design/; not the
history pages, nor docs/design-notes, which record the context a design was written in) say
what a reader needs where they cite it, a section of theirs or the goal itself: an issue
number of the tracker the project is built from ("issue 43") is a link no reader can
follow."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CITATION = re.compile(r"\bissues? #?\d+|\(#\d+\)", re.IGNORECASE)


def test_no_page_cites_an_issue_number() -> None:
    docs = ROOT / "docs"
    pages = [ROOT / "README.md", *sorted(docs.glob("*.md")), *sorted(docs.glob("design/*.md"))]
    cited = [
        f"{page.relative_to(ROOT)}:{number}: {line.strip()}"
        for page in pages
        if not page.name.endswith("-HISTORY.md")
        for number, line in enumerate(page.read_text().splitlines(), 1)
        if CITATION.search(line)
    ]
    assert cited == []
