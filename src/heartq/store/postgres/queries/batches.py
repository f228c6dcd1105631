"""The batches the hot statements read, as parallel typed arrays: one array parameter per
field (`%(finishes_id)s::text[]`, `%(finishes_eid)s::bigint[]`, ...) read back into rows
with `unnest`, instead of one JSON document parsed on the server (`json_to_recordset`:
about 40 k instructions a job in FINISH, more than half of a batch enqueue's; and every
key written out again in each row's text, several times the bytes).

One `Batch` says both sides of it, so they cannot drift: the SQL that reads it (`rows`,
`param`) and the packing of the documents `heartq.store.documents` builds into its
parameters (`pack`, called by the dialect's `batch`). A field that has the same value
in every document of a batch (a worker's finishes all `succeeded`, with no error, an
enqueue's jobs all of one task) travels once: its array is NULL, which `unnest` of
several arrays pads out with NULLs, and its value goes as a parameter of its own that
`rows` reads in their place. Only the ids always travel as an array: they say how many
rows there are. So a no-op job's finish sends its id and execution id, an enqueue's job
its id.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Sequence
from typing import Any

from heartq.store.postgres.queries.common import JOB_ID_TYPE


class Batch:
    """Documents bound as one typed array per field (`<name>_<key>`), or, for a field
    with one value in the whole batch, that value (`<name>_<key>_all`)."""

    def __init__(self, name: str, *fields: tuple[str, str]) -> None:
        """`fields`: (key in the documents, SQL type), the job id first."""
        assert fields[0] == ("id", JOB_ID_TYPE), "every batch is keyed by its job ids"
        self.name = name
        self.fields = fields
        self._rest = [(key, kind, operator.itemgetter(key)) for key, kind in fields[1:]]

    def param(self, key: str) -> str:
        """The array parameter of one field, typed."""
        return f"%({self.name}_{key})s::{dict(self.fields)[key]}[]"

    def place(self, row: str, keys: Sequence[str]) -> str:
        """The place in the batch of the row whose id is `row` (an SQL expression), for
        `at` of the fields `keys`: found once (`array_position`, a walk of the ids'
        array), and only where one of those fields' values differ in the batch (else
        NULL: each is the value all share). The batch names each id once."""
        arrays = ", ".join(self.param(key) for key in keys)
        return (
            f"CASE WHEN num_nonnulls({arrays}) > 0"
            f" THEN array_position({self.param('id')}, {row}) END"
        )

    def at(self, key: str, place: str) -> str:
        """One field of a batch row at `place` (an SQL expression: `place`'s, or the
        row's place in the ids' array): read from its array, or the value all share.
        Subscripting a NULL array is NULL without its subscript evaluated, so a place
        written out is only looked for where the field's values differ."""
        kind = dict(self.fields)[key]
        return f"coalesce(({self.param(key)})[{place}], %({self.name}_{key}_all)s::{kind})"

    def rows(self, alias: str) -> str:
        """The batch as a FROM item named `alias`, one row per document, its columns
        named by the keys."""
        arrays = ", ".join(self.param(key) for key, _ in self.fields)
        columns = ", ".join(
            ["u.id"]
            + [
                f"coalesce(u.{key}, %({self.name}_{key}_all)s::{kind}) AS {key}"
                for key, kind in self.fields[1:]
            ]
        )
        keys = ", ".join(key for key, _ in self.fields)
        return f"(SELECT {columns}\n    FROM unnest({arrays})\n    AS u({keys})) AS {alias}"

    def pack(self, docs: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """The parameters of `docs`: a list per field (psycopg binds a list as an array),
        or, where every document has one value, None and that value (no documents: no
        ids, every other field None; a heartbeat of a worker without jobs)."""
        # Each field's values read and compared in C (`itemgetter`, `list.count`): a
        # finish of a no-op job packs 10 fields, and a loop in Python over them cost
        # 0.7 us a job. (`count` tests identity before `==`: the one difference from
        # `all(v == first ...)` is a NaN, which no batch field holds: `documents.py`
        # refuses non-finite numbers.)
        params: dict[str, Any] = {f"{self.name}_id": _text_array(list(map(_ID, docs)))}
        for key, kind, getter in self._rest:
            values = list(map(getter, docs))
            if kind == "float8":  # an int among floats would change the array's type
                values = [None if v is None else float(v) for v in values]
            first = values[0] if values else None
            same = values.count(first) == len(values)
            if same:
                params[f"{self.name}_{key}"] = None
            elif kind == "bigint":
                params[f"{self.name}_{key}"] = _bigint_array(values)
            else:
                params[f"{self.name}_{key}"] = values
            params[f"{self.name}_{key}_all"] = first if same else None
        return params


def _text_array(values: list[Any]) -> str | list[Any]:
    """Strings as the text of a PostgreSQL array (`{"a","b"}`, each element quoted, `\\`
    and `"` escaped), which the statement's `::text[]` reads as psycopg's list would
    be: made by a few string operations in C, where psycopg dumps a list element by
    element in Python (1 us a finished job, its id and its execution id). Anything but
    strings without NUL (which PostgreSQL's text refuses) goes as the list, for psycopg
    to bind or refuse as ever."""
    try:
        joined = "\0".join(values)
    except TypeError:  # not all strings
        return values
    if not values or joined.count("\0") != len(values) - 1:
        return values  # none (bound as ever), or a NUL inside an element
    if _NEEDS_QUOTES.search(joined) is None:  # the usual ids: no byte more than psycopg's
        return "{" + joined.replace("\0", ",") + "}"
    return '{"' + joined.replace("\\", "\\\\").replace('"', '\\"').replace("\0", '","') + '"}'


_NEEDS_QUOTES = re.compile(r'(?i)[",\\{}\s]|(?:^|\x00)(?:null)?(?:\x00|$)')
"""Whether some element of NUL-joined strings must be quoted in an array's text (as
psycopg quotes it): it holds a quote, a comma, a backslash, a brace or white space, or
it is empty or the word NULL. Searched once over the joined elements."""


def _bigint_array(values: list[Any]) -> str | list[Any]:
    """Integers as the text of a PostgreSQL array (`{1,2}`): as `_text_array`, in C.
    Anything but `int`s (None, a bool) goes as the list."""
    if set(map(type, values)) != {int}:
        return values
    return "{" + ",".join(map(str, values)) + "}"


_ID = operator.itemgetter("id")

_LEASE = (("id", JOB_ID_TYPE), ("eid", "bigint"))
_PROGRESS = (("hp", "boolean"), ("pv", "float8"), ("ps", "text"), ("pm", "text"))

LEASE_BATCH = Batch("leases", *_LEASE)
"""Leases to start (`START_AHEAD`) or give back (`RELEASE`)."""

RENEWAL_BATCH = Batch("renewals", *_LEASE, *_PROGRESS, ("dt", "boolean"))
"""A heartbeat's leases, each with the progress its task reported, or to detach (`dt`:
`documents.renewal_doc`)."""

REPORT_BATCH = Batch("reports", *_LEASE, *_PROGRESS, ("hc", "boolean"), ("cp", "text"))
"""A pulse's reports (`documents.pulse_doc`)."""

FINISH_BATCH = Batch(
    "finishes",
    *_LEASE,
    ("status", "text"),
    ("outcome", "text"),
    ("result", "text"),
    ("error", "text"),
    ("delay", "float8"),
    ("keep", "boolean"),
    ("dead_reason", "text"),
    ("crash", "text"),
    ("pending", "boolean"),
)
"""Ended attempts (`documents.finish_doc`)."""

JOB_BATCH = Batch(
    "jobs",
    ("id", JOB_ID_TYPE),
    ("task", "text"),
    ("queue", "text"),
    ("args", "text"),
    ("priority", "integer"),
    ("delay", "float8"),
    ("max_retries", "integer"),
    ("retry_backoff", "float8"),
    ("retry_backoff_max", "float8"),
    ("chosen", "integer"),
    ("concurrency_key", "text"),
    ("concurrency_limit", "integer"),
    ("rate_key", "text"),
    ("rate_limit", "integer"),
    ("rate_period", "float8"),
    ("fair_key", "text"),
    ("fair_weight", "float8"),
    ("meta", "text"),
    ("expires_in", "float8"),
)
"""New jobs without a unique key or dependencies (`documents.new_job_doc`)."""

BATCHES = {
    b.name: b for b in (LEASE_BATCH, RENEWAL_BATCH, REPORT_BATCH, FINISH_BATCH, JOB_BATCH)
}
"""Each batch by the name the shared store asks for (`Dialect.batch`)."""
