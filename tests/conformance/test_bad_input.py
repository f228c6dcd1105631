"""Bad and hostile input at the storage level (I6: refused with a clear error at the
door, or stored and given back unchanged)."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import pytest

from heartq.config import DEFAULT_MAX_PAYLOAD_BYTES
from heartq.errors import ConfigError, PayloadError
from heartq.lifecycle.fate import failed, succeeded
from heartq.model import NewJob, Outcome, Progress, Renewal
from heartq.payload import (
    MAX_ERROR_CHARS,
    MAX_JSON_DEPTH,
    MAX_NAME_CHARS,
    clean_text,
    decode,
    encode,
    encode_args,
)
from heartq.store import Store

from .support import LEASE, claim_one

# -- encode_args refuses what cannot be stored -------------------------------------------


def nested(levels: int) -> list[Any]:
    """`levels` arrays, each holding the next: [[[...]]]."""
    value: list[Any] = []
    for _ in range(levels - 1):
        value = [value]
    return value


REFUSED: list[tuple[str, Any, str]] = [
    # (case, args, what the message must say)
    ("object", {"x": object()}, "JSON-serializable"),
    ("set", {"x": {1, 2}}, "JSON-serializable"),
    ("bytes", {"x": b"raw"}, "JSON-serializable"),
    ("nan", {"x": math.nan}, "JSON"),
    ("infinity", {"x": [1.0, math.inf]}, "JSON"),
    ("minus-infinity", {"x": {"y": -math.inf}}, "JSON"),
    ("list", [1, 2], "must be a JSON object (a dict), got list"),
    ("string", "repo_url=x", "must be a JSON object (a dict), got str"),
    ("int", 3, "must be a JSON object (a dict), got int"),
    ("tuple", ("a",), "must be a JSON object (a dict), got tuple"),
    ("int-key", {1: "a"}, "names must be strings, got 1"),
    ("none-key", {None: "a"}, "names must be strings, got None"),
    ("tuple-key", {("a", "b"): 1}, "names must be strings"),
    ("lone-surrogate", {"x": "\ud800"}, "lone surrogate"),
    ("lone-surrogate-low", {"x": ["ok", "a\udfffb"]}, "lone surrogate"),
    ("lone-surrogate-key", {"\ud800": 1}, "lone surrogate"),
    # NUL, in a key or a value at any depth: refused alike on every backend
    ("nul-value", {"x": "before\x00after"}, "NUL character (\\x00) in the value at ['x']"),
    ("nul-key", {"a\x00b": 1}, "NUL character (\\x00) in the key 'a\\x00b'"),
    ("nul-nested", {"x": [1, {"y": ["\x00"]}]}, "in the value at ['x'][1]['y'][0]"),
    ("nul-nested-key", {"x": [{"\x00": 1}]}, "in the key '\\x00' at ['x'][0]"),
    # nested deeper than MAX_JSON_DEPTH, or deeper than Python's json can even encode
    ("deep", {"x": nested(MAX_JSON_DEPTH)}, "nested too deeply: more than 100 levels"),
    ("very-deep", {"x": nested(100_000)}, "nested too deeply: more than 100 levels"),
]


@pytest.mark.parametrize(("args", "says"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_encode_args_refuses(args: Any, says: str) -> None:
    with pytest.raises(PayloadError) as raised:
        encode_args(args, limit=DEFAULT_MAX_PAYLOAD_BYTES)
    message = str(raised.value)
    assert says in message
    assert "\n" not in message
    assert message.startswith("job argument")
    assert isinstance(raised.value, ValueError)


def test_encode_args_accepts_none_as_no_arguments() -> None:
    assert encode_args(None, limit=10) == "{}"


def test_nesting_up_to_the_limit_and_escaped_backslashes_are_accepted() -> None:
    deepest = {"x": nested(MAX_JSON_DEPTH - 1)}  # the object is one level: 100 in all
    assert decode(encode_args(deepest, limit=DEFAULT_MAX_PAYLOAD_BYTES)) == deepest
    wide = {"x": [[i] for i in range(500)], "s": "[" * 500}  # many brackets, none deep
    assert decode(encode_args(wide, limit=DEFAULT_MAX_PAYLOAD_BYTES)) == wide
    text = {"x": "C:\\u0000 is a backslash, then u0000", "\\u0000": "\\\\u0000"}
    assert decode(encode_args(text, limit=DEFAULT_MAX_PAYLOAD_BYTES)) == text


@pytest.mark.parametrize("what", ["result", "checkpoint"])
@pytest.mark.parametrize(
    ("value", "says"),
    [("a\x00b", "NUL character"), ({"k\x00": 1}, "NUL character"),
     (nested(MAX_JSON_DEPTH + 1), "nested too deeply"), (nested(50_000), "nested too deeply")],
    ids=["nul", "nul-key", "deep", "very-deep"],
)  # fmt: skip
def test_results_and_checkpoints_follow_the_same_rules(what: str, value: Any, says: str) -> None:
    """What a task returns or checkpoints goes through the same door as arguments."""
    with pytest.raises(PayloadError, match=says) as raised:
        encode(value, what=what, limit=DEFAULT_MAX_PAYLOAD_BYTES)
    assert str(raised.value).startswith(what) and "\n" not in str(raised.value)


def _padded(total: int) -> dict[str, str]:
    """Arguments whose compact JSON is exactly `total` bytes: {"x":"aaa..."}."""
    return {"x": "a" * (total - len('{"x":""}'))}


def test_payload_size_limit_default_is_one_mib() -> None:
    assert DEFAULT_MAX_PAYLOAD_BYTES == 1024 * 1024
    at_limit = encode_args(_padded(DEFAULT_MAX_PAYLOAD_BYTES), limit=DEFAULT_MAX_PAYLOAD_BYTES)
    assert len(at_limit.encode()) == DEFAULT_MAX_PAYLOAD_BYTES
    with pytest.raises(PayloadError) as raised:
        encode_args(_padded(DEFAULT_MAX_PAYLOAD_BYTES + 1), limit=DEFAULT_MAX_PAYLOAD_BYTES)
    assert str(raised.value) == (
        "job arguments is 1048577 bytes of JSON, over the limit of 1048576 bytes"
    )


def test_payload_size_limit_custom_and_in_utf8_bytes() -> None:
    assert encode_args(_padded(100), limit=100)
    with pytest.raises(PayloadError, match="101 bytes of JSON, over the limit of 100 bytes"):
        encode_args(_padded(101), limit=100)
    # the limit is on UTF-8 bytes, not characters: 60 x "é" is 120 bytes
    with pytest.raises(PayloadError, match="over the limit of 100 bytes"):
        encode_args({"x": "é" * 60}, limit=100)


# -- hostile strings are stored and given back unchanged ----------------------------------

HOSTILE = {
    "quotes": 'it\'s "quoted" `back`',
    "sql": "'; DROP TABLE heartq_jobs; --",
    "sql-2": 'x") OR 1=1; DELETE FROM heartq_executions; --',
    "nul": "before\x00after",
    "only-nul": "\x00",
    "emoji": "\U0001f525 fire \U0001f469\u200d\U0001f4bb",
    "rtl": "\u202eevil\u202c \u200f\u05e9\u05dc\u05d5\u05dd\u200e",  # RLO, RLM, Hebrew
    "control": "tab\there\nnew line\r\x1b[31m red",
    "backslashes": "C:\\path\\to\\file \\u0000 \\n",
    "json-ish": '{"status": "succeeded", "$.id": [1]}',
    "long": "x" * 10_000,
    "empty": "",
}


def refused_as_name(text: str) -> bool:
    """What no backend takes as a task or queue name: blank, over `MAX_NAME_CHARS`, or with
    NUL (which SQLite's JSON functions cut and PostgreSQL's text type refuses)."""
    return not text.strip() or len(text) > MAX_NAME_CHARS or "\x00" in text


@pytest.mark.parametrize("text", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_strings_round_trip_through_enqueue(store: Store, t0: float, text: str) -> None:
    args = {text: text, "nested": [text, {"k": text}]}
    if "\x00" in text:  # refused in the arguments too (REFUSED above): the names here
        with pytest.raises(PayloadError, match="NUL"):
            encode_args(args, limit=DEFAULT_MAX_PAYLOAD_BYTES)
        args = {}
    job = NewJob(
        task=text, args_json=encode_args(args, limit=DEFAULT_MAX_PAYLOAD_BYTES), queue=text
    )
    if refused_as_name(text):
        with pytest.raises(ConfigError, match="name"):
            store.enqueue([job], now=t0)
        assert store.count_jobs() == []
        job = NewJob(task="t", args_json=job.args_json)  # in the arguments, anything but NUL
        (job_id,) = store.enqueue([job], now=t0)
        assert store.get_job(job_id)["args"] == args
        return
    (job_id,) = store.enqueue([job], now=t0)
    stored = store.get_job(job_id)
    assert stored["task"] == text
    assert stored["queue"] == text
    assert stored["args"] == args
    (listed,) = store.list_jobs(queue=text)
    assert (listed["task"], listed["args"]) == (text, args)
    assert [c for c in store.count_jobs() if c[0] == text] == [(text, "queued", 1)]


@pytest.mark.parametrize("text", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_strings_round_trip_through_claim(store: Store, t0: float, text: str) -> None:
    args = {"s": text.replace("\x00", "")}  # NUL: refused at the door (REFUSED above)
    name = "t" if refused_as_name(text) else text
    job = NewJob(
        task=name, args_json=encode_args(args, limit=DEFAULT_MAX_PAYLOAD_BYTES), queue=name
    )
    store.enqueue([job], now=t0)
    claimed = claim_one(store, "w1", t0, queues=("default", name))
    assert (claimed.task, claimed.queue, claimed.args) == (name, name, args)


@pytest.mark.parametrize("text", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_strings_round_trip_through_results(store: Store, t0: float, text: str) -> None:
    """Results and checkpoints are JSON and round-trip exactly (the worker's door,
    `payload.encode`, refuses NUL in them, as tested above; the store keeps whatever
    JSON it is given); errors and progress are plain text, kept exactly but for NUL,
    which becomes a visible `\\x00`."""
    shown = clean_text(text)
    job_id = store.enqueue([NewJob(task="t", args_json="{}", retry_backoff=0.0)], now=t0)[0]
    first = claim_one(store, "w1", t0)
    store.save_checkpoint(first.lease, json.dumps({"c": text}), now=t0)
    store.heartbeat("w1", [Renewal(first.lease, Progress(0.5, text, text))], LEASE, now=t0)
    progress = store.get_job(job_id)["progress"]
    assert (progress["stage"], progress["message"]) == (shown, shown)
    store.finish([failed(first, Outcome.FAILED, text)], now=t0 + 1)
    failed_job = store.get_job(job_id)
    assert failed_job["error"] == shown
    assert failed_job["executions"][0]["error"] == shown
    second = claim_one(store, "w1", t0 + 2)
    assert second.checkpoint == {"c": text}
    store.finish([succeeded(second, json.dumps([text]))], now=t0 + 3)
    assert store.get_job(job_id)["result"] == [text]
    assert decode(json.dumps(text)) == text


def test_a_huge_error_is_stored_as_its_two_ends(store: Store, t0: float) -> None:
    """A traceback of megabytes (a recursion, a huge repr) is kept as its start and its
    end, where the failing call and the exception are, whoever built the finish: the
    store clips what the worker's fate did not."""
    error = "first line\n" + "x" * 1_000_000 + "\nValueError: the last line"
    job_id = store.enqueue([NewJob(task="t", args_json="{}", max_retries=0)], now=t0)[0]
    job = claim_one(store, "w1", t0)
    store.finish([dataclasses.replace(failed(job, Outcome.FAILED, "x"), error=error)], now=t0 + 1)
    stored = store.get_job(job_id)["error"]
    assert len(stored) < MAX_ERROR_CHARS + 40
    assert stored.startswith("first line\n") and stored.endswith("ValueError: the last line")
    assert "[truncated]" in stored


# -- numbers no backend can store are refused at the door ---------------------------------

NON_FINITE = [math.nan, math.inf, -math.inf]


@pytest.mark.parametrize("field", ["delay", "retry_backoff", "retry_backoff_max"])
@pytest.mark.parametrize("value", NON_FINITE, ids=["nan", "inf", "-inf"])
def test_enqueue_refuses_non_finite_durations(
    store: Store, t0: float, field: str, value: float
) -> None:
    good = NewJob(task="t", args_json="{}")
    bad = NewJob(task="t", args_json="{}", **{field: value})
    with pytest.raises(PayloadError, match=field):
        store.enqueue([good, bad], now=t0)
    assert store.count_jobs() == []  # none of the batch


@pytest.mark.parametrize("field", ["retry_backoff", "retry_backoff_max"])
@pytest.mark.parametrize("value", [-1.0, 1e300])
def test_enqueue_refuses_backoffs_out_of_range(
    store: Store, t0: float, field: str, value: float
) -> None:
    with pytest.raises(PayloadError, match=field):
        store.enqueue([NewJob(task="t", args_json="{}", **{field: value})], now=t0)
    assert store.count_jobs() == []


@pytest.mark.parametrize("value", NON_FINITE, ids=["nan", "inf", "-inf"])
def test_heartbeat_refuses_a_non_finite_progress_value(
    store: Store, t0: float, value: float
) -> None:
    store.enqueue([NewJob(task="t", args_json="{}")], now=t0)
    job = claim_one(store, "w1", t0)
    before = store.get_job(job.id)
    with pytest.raises(PayloadError, match="progress"):
        store.heartbeat("w1", [Renewal(job.lease, Progress(value, "s", "m"))], LEASE, now=t0 + 1)
    assert store.get_job(job.id) == before
    answers = store.heartbeat("w1", [Renewal(job.lease, Progress(None, "s"))], LEASE, now=t0 + 2)
    assert store.get_job(job.id)["progress"]["stage"] == "s" and answers


@pytest.mark.parametrize("value", NON_FINITE, ids=["nan", "inf", "-inf"])
def test_finish_refuses_non_finite_numbers(store: Store, t0: float, value: float) -> None:
    store.enqueue([NewJob(task="t", args_json="{}")], now=t0)
    job = claim_one(store, "w1", t0)
    before = store.get_job(job.id)
    retry = failed(job, Outcome.FAILED, "boom")
    with pytest.raises(PayloadError, match="retry delay"):
        store.finish([dataclasses.replace(retry, retry_delay=value)], now=t0 + 1)
    with pytest.raises(PayloadError, match="crash context"):
        store.finish([dataclasses.replace(retry, crash={"exit_code": value})], now=t0 + 1)
    assert store.get_job(job.id) == before
    assert store.finish([retry], now=t0 + 1) == []
