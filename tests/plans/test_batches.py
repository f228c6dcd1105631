"""PostgreSQL's batches (`store/postgres/queries/batches.py`) read back, on the server,
the documents they were packed from: each field per row, whether it travelled as an
array or, being the same in every row, once."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from heartq.store.postgres.adapters import register_loaders
from heartq.store.postgres.queries.batches import FINISH_BATCH

KEYS = [key for key, _ in FINISH_BATCH.fields]


def _doc(i: int, **fields: Any) -> dict[str, Any]:
    doc: dict[str, Any] = dict.fromkeys(KEYS)
    doc.update(id=f"00000000-0000-7000-8000-{i:012x}", eid=i, status="succeeded",
               outcome="succeeded", delay=0.0, keep=False, pending=False)  # fmt: skip
    doc.update(fields)
    return doc


@pytest.mark.parametrize(
    "docs",
    [
        [],
        [_doc(1)],
        [_doc(1), _doc(2)],  # every field but the ids alike
        [_doc(1, error="boom", delay=2, keep=True), _doc(2, status="queued"), _doc(3)],
        [_doc(1, result='{"a, b": "{x}"}'), _doc(2, result=None, crash='{"k": "\\\\"}')],
    ],
    ids=["none", "one", "alike", "mixed", "quoted"],
)
def test_a_batch_reads_back_as_its_documents(
    pg_server_url: str, docs: list[dict[str, Any]]
) -> None:
    statement = f"SELECT {', '.join(KEYS)} FROM {FINISH_BATCH.rows('f')}"
    with psycopg.connect(pg_server_url) as conn:
        register_loaders(conn.adapters)  # a job id reads as `str`, as on heartq's own
        rows = conn.execute(statement, FINISH_BATCH.pack(docs)).fetchall()
    expected = [tuple(float(d[k]) if k == "delay" else d[k] for k in KEYS) for d in docs]
    assert rows == expected
