"""The batches the hot statements read, as parallel typed arrays: one array parameter per
field (`%(finishes_id)s::text[]`, `%(finishes_eid)s::bigint[]`, ...) read back into rows
with `unnest`, instead of one JSON document parsed on the server (`json_to_recordset`:
about 40 k instructions a job in FINISH, more than half of a batch enqueue's; and every
key written out again in each row's text, several times the bytes).

One `Batch` says both sides of it, so they cannot drift: the SQL that reads it (`rows`,
`param`) and the packing of the documents `heartq.store.documents` builds into its
parameters (`pack`, called by the dialect's `batch`). A field whose every value in a
batch is its default travels as NULL, not as an array: a NULL array is empty, and
`unnest` of several arrays pads the shorter ones with NULLs, which `rows` reads back as
the default (a no-op job's finish sends no result, error, crash, delay or flags).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Field:
    """A field of a batch: its key in the documents, its SQL type, and the value a NULL
    (the field left out of the whole batch) reads as."""

    key: str
    type: str
    default: Any = None


def _literal(value: Any) -> str:
    """A default as SQL: a constant of the code, never a caller's value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    assert isinstance(value, int | float), value
    return repr(value)


class Batch:
    """Documents bound as one typed array per field, named `<name>_<key>`."""

    def __init__(self, name: str, *fields: Field) -> None:
        assert fields[0].key == "id", "every batch is keyed by its job ids"
        self.name = name
        self.fields = fields

    def param(self, key: str) -> str:
        """The array parameter of one field, typed."""
        field = next(f for f in self.fields if f.key == key)
        return f"%({self.name}_{key})s::{field.type}[]"

    def rows(self, alias: str) -> str:
        """The batch as a FROM item named `alias`, one row per document, its columns
        named by the keys, a field left out reading as its default."""
        arrays = ", ".join(self.param(f.key) for f in self.fields)
        columns = ", ".join(
            f"u.{f.key}"
            if f.default is None
            else f"coalesce(u.{f.key}, {_literal(f.default)}) AS {f.key}"
            for f in self.fields
        )
        keys = ", ".join(f.key for f in self.fields)
        return f"(SELECT {columns} FROM unnest({arrays}) AS u({keys})) AS {alias}"

    def pack(self, docs: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """The parameters of `docs`: a list per field (psycopg binds a list as an array),
        or None where every document has the field's default."""
        params: dict[str, Any] = {}
        for field in self.fields:
            values = [doc[field.key] for doc in docs]
            if field.type == "float8":  # an int among floats would change the array's type
                values = [None if v is None else float(v) for v in values]
            default = field.default
            params[f"{self.name}_{field.key}"] = (
                None if all(v is default or v == default for v in values) else values
            )
        return params


_LEASE = (Field("id", "text"), Field("eid", "bigint"))
_PROGRESS = (
    Field("hp", "boolean", False),
    Field("pv", "float8"),
    Field("ps", "text"),
    Field("pm", "text"),
)

LEASE_BATCH = Batch("leases", *_LEASE)
"""Leases to start (`START_AHEAD`) or give back (`RELEASE`)."""

RENEWAL_BATCH = Batch("renewals", *_LEASE, *_PROGRESS)
"""A heartbeat's leases, each with the progress its task reported (`documents.renewal_doc`)."""

REPORT_BATCH = Batch(
    "reports", *_LEASE, *_PROGRESS, Field("hc", "boolean", False), Field("cp", "text")
)
"""A pulse's reports (`documents.pulse_doc`)."""

FINISH_BATCH = Batch(
    "finishes",
    *_LEASE,
    Field("status", "text"),
    Field("outcome", "text"),
    Field("result", "text"),
    Field("error", "text"),
    Field("delay", "float8", 0.0),
    Field("keep", "boolean", False),
    Field("dead_reason", "text"),
    Field("crash", "text"),
    Field("pending", "boolean", False),
)
"""Ended attempts (`documents.finish_doc`)."""

JOB_BATCH = Batch(
    "jobs",
    Field("id", "text"),
    Field("task", "text"),
    Field("queue", "text"),
    Field("args", "text"),
    Field("priority", "integer", 0),
    Field("delay", "float8", 0.0),
    Field("max_retries", "integer"),
    Field("retry_backoff", "float8"),
    Field("retry_backoff_max", "float8"),
    Field("chosen", "integer"),
    Field("concurrency_key", "text"),
    Field("concurrency_limit", "integer"),
    Field("rate_key", "text"),
    Field("rate_limit", "integer"),
    Field("rate_period", "float8"),
    Field("meta", "text"),
)
"""New jobs without a unique key or dependencies (`documents.new_job_doc`)."""

BATCHES = {b.name: b for b in (LEASE_BATCH, RENEWAL_BATCH, REPORT_BATCH, FINISH_BATCH, JOB_BATCH)}
"""Each batch by the name the shared store asks for (`Dialect.batch`)."""
