"""Every event name in heartq/events.py is documented: in docs/INTERFACE.md's list of
names and in docs/OPERATIONS.md's table of levels and fields."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from heartq import events

DOCS = Path(__file__).resolve().parents[1] / "docs"
NAMES = sorted(
    value
    for key, value in vars(events).items()
    if key.isupper() and isinstance(value, str) and re.fullmatch(r"[a-z_]+", value)
)


@pytest.mark.parametrize("doc", ["INTERFACE.md", "OPERATIONS.md"])
def test_every_event_is_documented(doc: str) -> None:
    text = (DOCS / doc).read_text()
    assert len(NAMES) > 30
    assert [name for name in NAMES if f"`{name}`" not in text] == []
