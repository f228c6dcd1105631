"""JSON encoding of what users hand to heartq: arguments, results, checkpoints.

Refusing bad input at the door is what keeps invariant I6 (nothing enqueued is lost):
a payload either encodes to strict JSON under the size limit, or the caller gets a
`PayloadError` that says what is wrong, and nothing is stored.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from heartq.errors import ConfigError, PayloadError

MAX_NAME_CHARS = 200
"""Task and queue names are at most 200 characters (and never contain NUL)."""
MAX_DURATION = 10 * 365 * 86400.0
"""Delays, timeouts and backoffs are at most ten years: beyond that a value is a mistake,
and an infinite or huge one would break the time arithmetic of every backend."""
INT32 = (-(2**31), 2**31 - 1)
"""Priorities and retry counts fit in 32 bits, the column type of every backend."""


def encode(value: Any, *, what: str, limit: int) -> str:
    """Strict JSON (no NaN/Infinity, UTF-8 encodable) of at most `limit` bytes."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"{what} must be JSON-serializable: {exc}") from None
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise PayloadError(
            f"{what} contains a string that is not valid Unicode (lone surrogate at "
            f"position {exc.start}); encode binary data as base64 first"
        ) from None
    if size > limit:
        raise PayloadError(f"{what} is {size} bytes of JSON, over the limit of {limit} bytes")
    return text


def encode_args(args: Any, *, limit: int) -> str:
    """Job arguments must be a JSON object: they become the task's keyword arguments."""
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise PayloadError(
            f"job arguments must be a JSON object (a dict), got {type(args).__name__}"
        )
    for key in args:
        if not isinstance(key, str):
            raise PayloadError(f"job argument names must be strings, got {key!r}")
    return encode(args, what="job arguments", limit=limit)


def check_meta(meta: Any) -> None:
    """A job's metadata: a JSON object (a mapping of string keys), like its arguments."""
    if not isinstance(meta, Mapping):
        raise PayloadError(f"job meta must be a JSON object (a dict), got {type(meta).__name__}")
    for key in meta:
        if not isinstance(key, str):
            raise PayloadError(f"job meta keys must be strings, got {key!r}")


def encode_meta(meta: Mapping[str, Any], *, limit: int) -> str | None:
    """A job's metadata as stored: None for none (nothing to store, nothing to read)."""
    if not meta:
        return None
    check_meta(meta)
    return encode(dict(meta), what="job meta", limit=limit)


def decode(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def clean_text(text: str | None) -> str | None:
    """Free text heartq stores as such (errors, progress stages and messages): NUL, which
    PostgreSQL's text type refuses, becomes a visible escape instead of failing a write."""
    if text is None or "\x00" not in text:
        return text
    return text.replace("\x00", "\\x00")


def check_name(kind: str, value: str) -> str:
    """Task and queue names: non-empty text of at most `MAX_NAME_CHARS`, without NUL
    (which neither SQLite's JSON functions nor PostgreSQL's text type can carry)."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{kind} name must be a non-empty string, got {value!r}")
    if len(value) > MAX_NAME_CHARS:
        raise ConfigError(f"{kind} name is {len(value)} characters, over {MAX_NAME_CHARS}")
    if "\x00" in value:
        raise ConfigError(f"{kind} name must not contain NUL characters")
    return value


MAX_UNIQUE_KEY_CHARS = 1000
"""A unique key is at most 1000 characters: an index entry, not a payload."""


def check_key(what: str, value: str) -> str:
    """A key (`unique_key`, `concurrency_key`): non-empty text of at most
    `MAX_UNIQUE_KEY_CHARS`, without NUL."""
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{what} must be a non-empty string, got {value!r}")
    if len(value) > MAX_UNIQUE_KEY_CHARS:
        raise ConfigError(f"{what} is {len(value)} characters, over {MAX_UNIQUE_KEY_CHARS}")
    if "\x00" in value:
        raise ConfigError(f"{what} must not contain NUL characters")
    return value


def check_unique_key(value: str) -> str:
    """A unique key (`check_key`)."""
    return check_key("unique_key", value)


def check_concurrency(key: str | None, limit: int | None) -> dict[str, Any]:
    """A job's concurrency key and limit, both or neither: the key as a unique key is
    (non-empty text, at most `MAX_UNIQUE_KEY_CHARS`, no NUL), the limit an integer >= 1."""
    if (key is None) != (limit is None):
        raise ConfigError("give concurrency_key and concurrency_limit together, or neither")
    if key is not None:
        check_key("concurrency_key", key)
        check_int("concurrency_limit", limit, minimum=1)
    return {"concurrency_key": key, "concurrency_limit": limit}


def check_duration(name: str, value: float | None, *, allow_zero: bool = False) -> None:
    """A number of seconds: finite, not negative (zero only where it means "none"), and at
    most `MAX_DURATION`. `None` passes (the default applies)."""
    if value is None:
        return
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number of seconds, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(f"{name} must be a positive number of seconds, got {value!r}")
    if value > MAX_DURATION:
        raise ConfigError(f"{name} must be at most {MAX_DURATION:g} s (ten years), got {value!r}")


def check_int(name: str, value: int | None, *, minimum: int = INT32[0]) -> None:
    """An integer (not a bool) between `minimum` and the 32-bit maximum."""
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    if not minimum <= value <= INT32[1]:
        raise ConfigError(f"{name} must be between {minimum} and {INT32[1]}, got {value!r}")
