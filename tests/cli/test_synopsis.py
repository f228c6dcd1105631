"""docs/INTERFACE.md's synopsis of the command line says what the commands take: every
option of every command, and for an option with choices, all of them in the command's
order (it once left out `heartq enqueue --on-conflict` and wrote
`--on-dependency-failure cancel|run`, `block` being the default)."""

from __future__ import annotations

import re
from pathlib import Path

import click

from heartq.cli.main import cli
from tests.cli.helpers import leaf_commands

INTERFACE = Path(__file__).resolve().parents[2] / "docs" / "INTERFACE.md"
GLOBAL = {"--help", "--url"}
"""Options every command takes, said once before the synopsis."""


def _synopses() -> dict[str, str]:
    """Each command's synopsis in INTERFACE.md, as written: the lines of a code block that
    start with `heartq COMMAND`, and those that continue them (indented)."""
    found: dict[str, str] = {}
    names = sorted(leaf_commands(cli, hidden=False), key=len, reverse=True)
    current = None
    for line in INTERFACE.read_text().splitlines():
        if line.startswith("heartq "):
            rest = line[len("heartq ") :]
            current = next((n for n in names if rest == n or rest.startswith(n + " ")), None)
            if current is not None:
                found[current] = found.get(current, "") + " " + rest
        elif current is not None and line.startswith(" "):
            found[current] += " " + line.strip()
        else:
            current = None
    return found


def test_the_synopsis_names_every_option_and_all_its_choices() -> None:
    synopses = _synopses()
    wrong: dict[str, list[str]] = {}
    for name, command in sorted(leaf_commands(cli, hidden=False).items()):
        written = synopses.get(name, "")
        options = [p for p in command.params if isinstance(p, click.Option) and not p.hidden]
        flags = {o for p in options for o in p.opts if o.startswith("--")} - GLOBAL
        problems = sorted(flag for flag in flags if not re.search(rf"{flag}\b", written))
        for option in options:
            if isinstance(option.type, click.Choice):
                flag = next(o for o in option.opts if o.startswith("--"))
                choices = "|".join(str(c) for c in option.type.choices)
                if f"{flag} {choices}" not in written:
                    problems.append(f"{flag} {choices}")
        if problems:
            wrong[name] = problems
    assert len(synopses) >= 15
    assert wrong == {}
