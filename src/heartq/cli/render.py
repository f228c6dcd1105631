"""Human output of the operator commands: rich tables that read well at 80 columns.

On a terminal, rich uses its width and colours, and tables cut their long free-text
columns to fit. Piped into a file or another program (`heartq jobs list | grep ...`),
the output is plain text, with no escape codes, and nothing is cut: each table takes its
natural width, since a script greps for the whole task name. Everything a user stored
(task names, arguments, errors) is printed as text, never as rich markup.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import IO, TextIO, cast

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

PIPED_WIDTH = 4096
"""Output that is not a terminal is laid out for 4096 columns, whatever `$COLUMNS` says
(an exported `$COLUMNS` would otherwise cut what a script reads): tables keep their
natural width, and trailing padding is stripped (`_TidyWriter`)."""
MIN_FLEXIBLE_WIDTH = 4
"""A column cut to fit is never narrower than 4 characters."""

STATUS_STYLES = {
    "waiting": "magenta",
    "blocked": "bold magenta",
    "queued": "yellow",
    "claimed": "blue",
    "running": "cyan",
    "succeeded": "green",
    "dead": "bold red",
    "cancelled": "dim",
    "failed": "red",
    "crashed": "bold red",
    "timed_out": "red",
    "released": "dim",
    "snoozed": "yellow",
    "active": "green",
    "stopped": "dim",
    "inactive": "red",
    "gone": "bold red",
}


class _TidyWriter:
    """Passes text on to `out` without the trailing spaces rich pads table rows with."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._pending = ""
        # rich picks ASCII borders for a stdout that cannot encode its box characters
        self.encoding = getattr(out, "encoding", None) or "utf-8"

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        lines = (self._pending + text).split("\n")
        self._pending = lines.pop()
        for line in lines:
            self._out.write(line.rstrip(" ") + "\n")
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self._out.write(self._pending)
            self._pending = ""
        self._out.flush()


def make_console() -> Console:
    """stdout, at the terminal's width; plain text, uncut and without trailing spaces,
    when piped."""
    if sys.stdout.isatty():
        return Console(highlight=False, markup=False, emoji=False, soft_wrap=False)
    return Console(
        file=cast(IO[str], _TidyWriter(sys.stdout)),
        highlight=False,
        markup=False,
        emoji=False,
        soft_wrap=False,
        width=PIPED_WIDTH,
    )


def table(*columns: str, title: str | None = None) -> Table:
    """A borderless table with an underlined header: compact, and tidy as plain text."""
    t = Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1, 0, 0),
        header_style="bold",
        title=title,
        title_justify="left",
        title_style="bold",
    )
    for name in columns:
        t.add_column(name)
    return t


def fit(t: Table, width: int, shrink: Iterable[str] = (), wrap: Iterable[str] = ()) -> None:
    """Make `t` fit `width` columns: every column stays whole on one line except those
    named, which share the room left: `shrink` ones are cut with an ellipsis, `wrap` ones
    wrap. Call once the rows are in."""
    wrapping = set(wrap)
    flexible = set(shrink) | wrapping
    natural: dict[int, int] = {}
    for index, column in enumerate(t.columns):
        name = str(column.header)
        cells = [c.plain if isinstance(c, Text) else str(c) for c in column.cells]
        natural[index] = max([len(name), *(len(c) for c in cells)])
        column.no_wrap = name not in wrapping
        column.overflow = "fold" if name in wrapping else "ellipsis"
        if name not in flexible:
            column.min_width = natural[index]
    gaps = 2 * (len(t.columns) - 1)  # one space of padding and one of divider
    room = (
        width
        - gaps
        - sum(n for i, n in natural.items() if str(t.columns[i].header) not in flexible)
    )
    pending = sorted((n, i) for i, n in natural.items() if str(t.columns[i].header) in flexible)
    while pending:  # the narrowest get what they need; the rest share what is left
        share = max(MIN_FLEXIBLE_WIDTH, room // len(pending))
        need, index = pending.pop(0)
        given = min(need, share)
        t.columns[index].max_width = given
        t.columns[index].min_width = min(given, MIN_FLEXIBLE_WIDTH)
        room -= given


def status_text(status: str | None) -> Text:
    value = status or "-"
    return Text(value, style=STATUS_STYLES.get(value, ""))


def key_values(rows: Iterable[tuple[str, str | Text]]) -> Table:
    """Two columns, `key  value`, with the values wrapping under themselves."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for key, value in rows:
        grid.add_row(key, value if isinstance(value, Text) else Text(value))
    return grid
