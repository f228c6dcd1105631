"""heartq's statements sent with PostgreSQL's own `$1` placeholders, each converted once.

psycopg turns a statement's `%(name)s` placeholders into `$1`, `$2`, ... at every
execute, and keeps the result only for statements of up to 4 KiB (its
`MAX_CACHED_STATEMENT_LENGTH`): the claim (7.7 KB) and the finish (4.2 KB) were split by
a regular expression at every call: 14 % of a worker's Python time at 500 jobs/s
(py-spy `--gil`, psycopg's `_query2pg_nocache`). heartq's statements are a fixed set of
texts, so each is converted once here, and psycopg's `RawCursor` binds the values by
position without reading the text again. Every connection heartq opens makes its
cursors of `NamedCursor`; a caller's borrowed connection keeps its own, and the one
lent to a task's `ctx.transaction()` makes psycopg's own while the task has it
(`borrowed.task_scope`).
"""

from __future__ import annotations

import functools
import re
from typing import Any

import psycopg
from psycopg import sql

_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%s|%%")


@functools.lru_cache(maxsize=1024)
def positional(statement: str) -> tuple[str, tuple[str | int, ...]]:
    """`statement` with its placeholders as `$1`, `$2`, ... and `%%` as `%`, and what
    each number stands for: a name of `%(name)s` (a name used twice is one number), or
    the place of a `%s` among the values."""
    keys: list[str | int] = []

    def number(match: re.Match[str]) -> str:
        if match.group(0) == "%%":
            return "%"
        key: str | int = match.group(1) or sum(isinstance(k, int) for k in keys)
        if key not in keys:
            keys.append(key)
        return f"${keys.index(key) + 1}"

    return _PLACEHOLDER.sub(number, statement), tuple(keys)


class NamedCursor(psycopg.RawCursor[Any]):
    """A cursor that takes statements with `%(name)s` placeholders and a mapping of
    values, or `%s` ones and a sequence, as psycopg's own `Cursor` does (a composed
    statement too); a statement without values as `RawCursor` does."""

    def execute(
        self,
        query: Any,
        params: Any = None,
        *,
        prepare: bool | None = None,
        binary: bool | None = None,
    ) -> NamedCursor:
        if params is not None and isinstance(query, sql.Composable):
            query = query.as_string(self)  # placeholders, if any, are in its text
        if params is not None and isinstance(query, str):
            text, keys = positional(query)
            try:
                values = [params[key] for key in keys]
            except (KeyError, IndexError, TypeError) as missing:
                raise psycopg.ProgrammingError(f"query parameter missing: {missing}") from None
            super().execute(text, values, prepare=prepare, binary=binary)
        else:
            super().execute(query, params, prepare=prepare, binary=binary)
        return self
