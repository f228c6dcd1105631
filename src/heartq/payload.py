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

from heartq import rates
from heartq.errors import ConfigError, PayloadError

MAX_NAME_CHARS = 200
"""Task and queue names are at most 200 characters (and never contain NUL)."""
MAX_DURATION = 10 * 365 * 86400.0
"""Delays, timeouts and backoffs are at most ten years: beyond that a value is a mistake,
and an infinite or huge one would break the time arithmetic of every backend."""
INT32 = (-(2**31), 2**31 - 1)
"""Priorities and retry counts fit in 32 bits, the column type of every backend."""


MAX_JSON_DEPTH = 100
"""Arguments, results and checkpoints nest at most 100 arrays and objects deep. Python's
`json` recurses once per level, so a payload nested near the interpreter's recursion limit
would encode in one process and fail to decode in a worker whose stack is deeper; no real
payload comes near 100, and a mistake (a structure that refers to itself through copies,
a parser's output) gets one clear line instead of a `RecursionError`."""

NUL = "\x00"
"""The character no stored text may hold: PostgreSQL's text type refuses it, SQLite's JSON
functions stop at it, and `jsonb` (where operators query arguments) cannot hold `\\u0000`."""


def too_deep(what: str) -> PayloadError:
    """The one error for a payload nested deeper than `MAX_JSON_DEPTH`, wherever found."""
    return PayloadError(
        f"{what} nested too deeply: more than {MAX_JSON_DEPTH} levels of arrays and objects "
        "(flatten it, or store the structure elsewhere and pass its key)"
    )


NULL = "null"
"""JSON's null: what a task that returns nothing stores as its result."""

_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
"""The strict encoder, made once: `json.dumps` with these settings builds a new encoder on
every call (only its defaults share one), and every enqueue and result comes through here.
An encoder keeps nothing between calls, so threads share it as `json.dumps` shares its
own."""


def encode(value: Any, *, what: str, limit: int) -> str:
    """Strict JSON (no NaN/Infinity, UTF-8 encodable, no NUL anywhere, at most
    `MAX_JSON_DEPTH` levels) of at most `limit` bytes."""
    if value is None and limit >= len(NULL):
        return NULL  # most tasks return nothing: no encoder, no checks
    try:
        text = _ENCODER.encode(value)
    except RecursionError:
        raise too_deep(what) from None
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
    # Both looks are over the encoded text first (C speed), and walk the value only when
    # the text says it may be needed: a NUL is always escaped as \u0000 in JSON, and a
    # payload with at most MAX_JSON_DEPTH brackets cannot nest deeper than that.
    if "\\u0000" in text and (where := _nul_in(value)) is not None:
        raise PayloadError(
            f"{what} with a NUL character (\\x00) in {where}: heartq stores no NUL "
            "(remove it, or encode binary data as base64 first)"
        )
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and _deeper_than(value, MAX_JSON_DEPTH):
        raise too_deep(what)
    return text


def _nul_in(value: Any) -> str | None:
    """Where the first NUL of a JSON value is (`the key 'a\\x00'`, `the value at
    ["x"][2]`), or None when it has none (its text only held an escaped backslash
    followed by "u0000")."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str) and NUL in item:
            return f"the value at {path}" if path else "the value"
        if isinstance(item, dict):
            for key, child in item.items():
                if NUL in key:
                    return f"the key {key!r}" + (f" at {path}" if path else "")
                stack.append((child, f"{path}[{key!r}]"))
        elif isinstance(item, list | tuple):
            stack.extend((child, f"{path}[{i}]") for i, child in enumerate(item))
    return None


def _deeper_than(value: Any, limit: int) -> bool:
    """True when arrays and objects nest more than `limit` deep in `value` (walked
    without recursion: the value may be too deep for it)."""
    if not isinstance(value, dict | list | tuple):
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list | tuple))
    return False


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
    """Free text heartq captures itself (errors, tracebacks, dead reasons): NUL, which
    PostgreSQL's text type refuses, becomes a visible escape instead of failing a write
    (a traceback is kept, not refused: the task that raised it has already run). Text a
    user gives is refused instead (`check_text`; `ctx.heartbeat`'s stage and message
    too); the store still escapes a progress report's, whoever wrote it."""
    if text is None or NUL not in text:
        return text
    return text.replace(NUL, "\\x00")


MAX_ERROR_CHARS = 16_000
"""Errors (tracebacks) are stored truncated to this many characters."""


def clip_error(text: str | None) -> str | None:
    """An error's text as stored, whoever ended the attempt: cleaned (`clean_text`) and,
    if longer than `MAX_ERROR_CHARS`, cut in the middle (a recursion's traceback can be
    megabytes): its start and its end say most."""
    text = clean_text(text)
    if text is None or len(text) <= MAX_ERROR_CHARS:
        return text
    half = MAX_ERROR_CHARS // 2
    return text[:half] + "\n... [truncated] ...\n" + text[-half:]


def check_text(what: str, value: str) -> str:
    """Text heartq stores as given (names, keys, who cancelled): without NUL, which
    PostgreSQL's text type refuses and SQLite's JSON functions cut, so a value is refused
    alike on every backend, before anything is stored."""
    if NUL in value:
        raise ConfigError(f"{what} must not contain NUL characters")
    return value


def check_name(kind: str, value: str) -> str:
    """Task and queue names: non-empty text of at most `MAX_NAME_CHARS`, without NUL."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{kind} name must be a non-empty string, got {value!r}")
    if len(value) > MAX_NAME_CHARS:
        raise ConfigError(f"{kind} name is {len(value)} characters, over {MAX_NAME_CHARS}")
    return check_text(f"{kind} name", value)


MAX_UNIQUE_KEY_CHARS = 1000
"""A unique key is at most 1000 characters: an index entry, not a payload."""


def check_key(what: str, value: str) -> str:
    """A key (`unique_key`, `concurrency_key`, `rate_key`): non-empty text of at most
    `MAX_UNIQUE_KEY_CHARS`, without NUL."""
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{what} must be a non-empty string, got {value!r}")
    if len(value) > MAX_UNIQUE_KEY_CHARS:
        raise ConfigError(f"{what} is {len(value)} characters, over {MAX_UNIQUE_KEY_CHARS}")
    return check_text(what, value)


def check_unique_key(value: str) -> str:
    """A unique key (`check_key`)."""
    return check_key("unique_key", value)


MAX_DEPENDENCIES = 10_000
"""A job waits for at most 10,000 others (a group's callback for as many members)."""


def check_dependencies(value: Any) -> list[str]:
    """A job's `depends_on`: job ids (a single id may be given alone), each non-empty text
    of at most `MAX_NAME_CHARS` without NUL, at most `MAX_DEPENDENCIES` of them; one given
    twice counts once (in its first place)."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise ConfigError(f"depends_on must be a list of job ids, got {value!r}")
    ids: list[str] = []
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise ConfigError(f"depends_on must hold job ids (non-empty strings), got {item!r}")
        if len(item) > MAX_NAME_CHARS:
            raise ConfigError(
                f"depends_on: job id is {len(item)} characters, over {MAX_NAME_CHARS}"
            )
        ids.append(check_text("depends_on", item))
    unique = list(dict.fromkeys(ids))
    if len(unique) > MAX_DEPENDENCIES:
        raise ConfigError(f"depends_on names {len(unique)} jobs, over {MAX_DEPENDENCIES}")
    return unique


def check_concurrency(key: str | None, limit: int | None) -> dict[str, Any]:
    """A job's concurrency key and limit, both or neither: the key as a unique key is
    (non-empty text, at most `MAX_UNIQUE_KEY_CHARS`, no NUL), the limit an integer >= 1."""
    if (key is None) != (limit is None):
        raise ConfigError("give concurrency_key and concurrency_limit together, or neither")
    if key is not None:
        check_key("concurrency_key", key)
        check_int("concurrency_limit", limit, minimum=1)
    return {"concurrency_key": key, "concurrency_limit": limit}


MAX_FAIR_WEIGHT = 1000.0
"""The largest weight a fairness key may have: a key 1,000 times another's share is as
far as a claim of 50 slots can tell apart."""


def check_fair(key: str | None, weight: float | None) -> dict[str, Any]:
    """A job's fairness key and weight: the key as a unique key is, the weight (only with
    a key) a finite number from 0.001 to `MAX_FAIR_WEIGHT` (None: 1)."""
    if key is None:
        if weight is not None:
            raise ConfigError("fair_weight needs a fair_key: the weight of which share?")
        return {"fair_key": None, "fair_weight": None}
    check_key("fair_key", key)
    if weight is not None:
        if (
            isinstance(weight, bool)
            or not isinstance(weight, int | float)
            or not math.isfinite(weight)
            or not 0.001 <= weight <= MAX_FAIR_WEIGHT
        ):
            raise ConfigError(
                f"fair_weight must be a number from 0.001 to {MAX_FAIR_WEIGHT:g}, got {weight!r}"
            )
        weight = float(weight)
    return {"fair_key": key, "fair_weight": weight}


def check_rate(key: str | None, limit: int | None, period: float | None) -> dict[str, Any]:
    """A job's rate key, limit and period, all or none: the key as a unique key is, the
    limit a whole number of starts and the period seconds within `heartq.rates`' bounds
    (what `parse_rate` makes of `"100/m"`)."""
    if (key is None) != (limit is None) or (key is None) != (period is None):
        raise ConfigError("give rate_key and rate_limit together, or neither")
    if key is not None:
        check_key("rate_key", key)
        assert limit is not None and period is not None
        rates.checked(limit, period)
    return {"rate_key": key, "rate_limit": limit, "rate_period": period}


def duration_problem(seconds: float) -> str | None:
    """What makes a number of seconds no duration heartq takes, said after its name
    (`must be a finite number of seconds`), or None: the one rule for every duration a
    user gives, as an argument (`check_duration`), an option (`heartq ... --older-than`,
    the command line's `Seconds`) or a form field (the dashboard's purge). NaN, infinity
    and ages past `MAX_DURATION` are mistakes, never "forever"."""
    if not math.isfinite(seconds):
        return "must be a finite number of seconds"
    if seconds > MAX_DURATION:
        return f"must be at most {MAX_DURATION:g} s (ten years)"
    return None


def check_duration(name: str, value: float | None, *, allow_zero: bool = False) -> None:
    """A number of seconds: finite, not negative (zero only where it means "none"), and at
    most `MAX_DURATION`. `None` passes (the default applies)."""
    if value is None:
        return
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ConfigError(f"{name} must be a finite number of seconds, got {value!r}")
    problem = duration_problem(value)
    if problem is not None:
        raise ConfigError(f"{name} {problem}, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(f"{name} must be a positive number of seconds, got {value!r}")


def check_int(name: str, value: int | None, *, minimum: int = INT32[0]) -> None:
    """An integer (not a bool) between `minimum` and the 32-bit maximum: every integer
    heartq stores or hands the database (a priority, a retry count, a concurrency
    limit, a worker's concurrency, a claim's limit or buffer, a list's limit) is one, so
    none reaches it as an overflow on one backend and passes on the other. The command
    line's integer options read the same bound (`heartq.cli.common.Count`)."""
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    if not minimum <= value <= INT32[1]:
        raise ConfigError(f"{name} must be between {minimum} and {INT32[1]}, got {value!r}")
