"""Ids that an array's text form must quote or escape (quotes, backslashes, commas,
braces, spaces, the word NULL) go through every batch intact: the enqueue's, the
finish's and the release's (PostgreSQL binds a batch's ids and execution ids as the
text of an array, `postgres/queries/batches.py`)."""

from __future__ import annotations

import pytest

from heartq.lifecycle.fate import succeeded
from heartq.model import JobStatus
from heartq.store import Store
from heartq.store.postgres.queries.batches import _bigint_array, _text_array

from .support import LEASE, new_job, register

IDS = ['a"b', "c\\d", "e,f", "{g}", "NULL", " h ", "i\\\"j", "k\\", "é", "x", "null", "a\tb"]


def test_ids_an_array_quotes_go_through_every_batch(store: Store) -> None:
    t0 = store.clock()
    register(store, "w1", t0)
    assert store.enqueue([new_job(id=job_id) for job_id in IDS], now=t0) == IDS
    claimed = store.claim("w1", ["default"], len(IDS), LEASE, now=t0)
    assert sorted(job.id for job in claimed) == sorted(IDS)
    done, back = claimed[: len(IDS) // 2], claimed[len(IDS) // 2 :]
    assert store.finish([succeeded(job, "1") for job in done], now=t0 + 1) == []
    assert store.release([job.lease for job in back], now=t0 + 1) == []
    for job in done:
        assert store.get_job(job.id)["status"] == JobStatus.SUCCEEDED
    for job in back:
        assert store.get_job(job.id)["status"] == JobStatus.QUEUED


def test_the_arrays_text() -> None:
    """What is not strings (integers) without NUL (and not None or a bool) goes as the
    list, for psycopg to bind or refuse as before."""
    assert _text_array(['a"b', "c\\d", "e,f"]) == '{"a\\"b","c\\\\d","e,f"}'
    assert _text_array(["j-1", "j_2", "é"]) == "{j-1,j_2,é}"  # nothing to quote
    for quoted in (["a", ""], ["", "a"], ["a", "", "b"], [""], ["a", "nUlL"], ["null"], ["a b"]):
        assert _text_array(quoted).startswith('{"'), quoted
    assert _text_array(["nulls", "anull"]) == "{nulls,anull}"
    assert _text_array(["a\0b", "c"]) == ["a\0b", "c"]
    assert _text_array([]) == []
    assert _text_array([1]) == [1]
    assert _bigint_array([1, 22, -3]) == "{1,22,-3}"
    for odd in ([1, None], [1, True], [1, "2"], []):
        assert _bigint_array(odd) == odd


@pytest.mark.parametrize("job_id", ["plain", 'q"uote'])
def test_a_lone_finish(store: Store, job_id: str) -> None:
    t0 = store.clock()
    register(store, "w1", t0)
    store.enqueue([new_job(id=job_id)], now=t0)
    (job,) = store.claim("w1", ["default"], 1, LEASE, now=t0)
    assert store.finish([succeeded(job, None)], now=t0 + 1) == []
    assert store.get_job(job_id)["status"] == JobStatus.SUCCEEDED
