"""Helpers of the plan tests that prepare heartq's statements themselves (`PREPARE`, then
`EXPLAIN EXECUTE` under a forced generic plan): the plan a long-lived worker's session
runs after its first five, which a plain `EXPLAIN` of the text never shows."""

from __future__ import annotations

import re


def positional(statement: str) -> tuple[str, list[str]]:
    """`statement` with its named placeholders as `$1`, `$2`, ..., and their names."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    return re.sub(r"%\((\w+)\)s", number, statement).replace("%%", "%"), names
