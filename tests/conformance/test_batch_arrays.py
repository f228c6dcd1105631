"""Texts that an array's text form must quote or escape (quotes, backslashes, commas,
braces, spaces, the word NULL) go through every batch intact, and so do the ids each
batch is keyed by: the enqueue's, the finish's and the release's (PostgreSQL binds a
batch's ids and execution ids as the text of an array, its other fields as psycopg's
arrays, `postgres/queries/batches.py`). A job's id is a UUID (schema v44), which never
needs quoting; `_text_array` still quotes what does (`test_the_arrays_text`)."""

from __future__ import annotations

import json

import pytest

from heartq.lifecycle.fate import succeeded
from heartq.model import JobStatus
from heartq.store import Store
from heartq.store.postgres.queries.batches import _bigint_array, _text_array

from .support import LEASE, new_ids, new_job, register

TEXTS = ['a"b', "c\\d", "e,f", "{g}", "NULL", " h ", 'i\\"j', "k\\", "é", "x", "null", "a\tb"]


def test_texts_an_array_quotes_go_through_every_batch(store: Store) -> None:
    """Each job its own id (a caller's) and an argument and a result an array's text
    would quote: the enqueue's batch, the claim, the finish's and the release's keep
    each job's id with its own texts."""
    t0 = store.clock()
    register(store, "w1", t0)
    ids = new_ids(len(TEXTS))
    text_of = dict(zip(ids, TEXTS, strict=True))
    jobs = [new_job(args={"s": text}, id=job_id) for job_id, text in text_of.items()]
    assert store.enqueue(jobs, now=t0) == ids
    claimed = store.claim("w1", ["default"], len(ids), LEASE, now=t0)
    assert sorted(job.id for job in claimed) == ids
    assert {job.id: job.args for job in claimed} == {i: {"s": s} for i, s in text_of.items()}
    done, back = claimed[: len(ids) // 2], claimed[len(ids) // 2 :]
    finishes = [succeeded(job, json.dumps(text_of[job.id])) for job in done]
    assert store.finish(finishes, now=t0 + 1) == []
    assert store.release([job.lease for job in back], now=t0 + 1) == []
    for job in done:
        stored = store.get_job(job.id)
        assert stored["status"] == JobStatus.SUCCEEDED
        assert (stored["args"], stored["result"]) == ({"s": text_of[job.id]}, text_of[job.id])
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


@pytest.mark.parametrize("result", ["plain", 'q"uote'])
def test_a_lone_finish(store: Store, result: str) -> None:
    """A batch of one: its id's array of one element, its result the value all share."""
    t0 = store.clock()
    register(store, "w1", t0)
    (job_id,) = new_ids(1)
    store.enqueue([new_job(id=job_id)], now=t0)
    (job,) = store.claim("w1", ["default"], 1, LEASE, now=t0)
    assert store.finish([succeeded(job, json.dumps(result))], now=t0 + 1) == []
    stored = store.get_job(job_id)
    assert (stored["status"], stored["result"]) == (JobStatus.SUCCEEDED, result)
