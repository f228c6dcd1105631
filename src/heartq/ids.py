"""Identifiers: time-ordered job ids and readable worker ids."""

from __future__ import annotations

import getpass
import os
import re
import secrets
import socket
import threading
import time

_lock = threading.Lock()
_last_ms = 0
_sequence = 0


def new_job_id() -> str:
    """A UUIDv7: millisecond timestamp first, so ids sort by creation time and inserts
    land at the right edge of the primary-key index. Within one process ids strictly
    increase, even within one millisecond (RFC 9562's counter in `rand_a`): jobs that
    tie on time still keep the order they were enqueued in."""
    global _last_ms, _sequence
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms > _last_ms:
            _last_ms, _sequence = ms, secrets.randbits(10)  # room to count up
        else:
            _sequence += 1
            if _sequence >= 1 << 12:  # counter spent: borrow the next millisecond
                _last_ms, _sequence = _last_ms + 1, 0
            ms = _last_ms
        sequence = _sequence
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76  # version 7
    value |= sequence << 64  # 12 bits rand_a: a counter
    value |= 0b10 << 62  # variant
    value |= secrets.randbits(62)
    return _dashed(f"{value:032x}", ID_GROUPS)  # str(uuid.UUID(int=value)), no object


def first_id_at(seconds: float) -> str:
    """The least job id of the millisecond `seconds` (since the epoch) falls in: every id
    made earlier sorts before it as text, every id made then or later after it (their
    leading digits are their time). How old a job's id is, asked of an index of ids."""
    ms = min(max(0, int(seconds * 1000)), (1 << 48) - 1)
    return _dashed(f"{ms << 80:032x}", ID_GROUPS)


ID_GROUPS = (8, 4, 4, 4, 12)
"""The hex digits of each dash-separated group of a job id, as printed: 48 bits of
milliseconds (8 + 4), the version and a 12-bit counter (4), the variant and 62 random bits
(4 + 12). So ids made together share their start, and their last 12 digits are random."""

HEX_DIGITS = frozenset("0123456789abcdef")

LEAST_JOB_ID = "00000000-0000-0000-0000-000000000000"
"""The least job id (the nil UUID, `first_id_at(0)`): a floor below every id."""

_JOB_ID = re.compile("-".join(f"[0-9a-f]{{{size}}}" for size in ID_GROUPS))


def is_job_id(text: str) -> bool:
    """Whether `text` is a job id as heartq stores and prints one: a UUID in lower case
    with its dashes (36 characters), not the least one (`LEAST_JOB_ID`, the ready log's
    "before every id"). PostgreSQL keeps ids as `uuid` and prints them so; any other text
    names no job, and the store answers "not found" without asking (the database would
    refuse it as the wrong type)."""
    return len(text) == 36 and _JOB_ID.fullmatch(text) is not None and text != LEAST_JOB_ID


def id_range(prefix: str) -> tuple[str, str] | None:
    """The least and the greatest job id that start with `prefix` (lower case, dashes
    where an id has them), or None if no id can: a shortened id looked up as a range of
    the ids' index, as a `uuid` is compared by its value, not as text."""
    layout = _dashed("0" * 32, ID_GROUPS)
    if len(prefix) > len(layout) or any(
        (c == "-") != (layout[i] == "-") or (c != "-" and c not in HEX_DIGITS)
        for i, c in enumerate(prefix)
    ):
        return None
    rest = layout[len(prefix) :]
    return prefix + rest, prefix + rest.replace("0", "f")


def typed_forms(typed: str) -> tuple[str, str]:
    """How a shortened job id, as an operator typed it, reads as the start and as the end
    of an id printed with its dashes: `(prefix, suffix)`, lower case, dashes at either end
    dropped. Digits typed without any dash (copied from a tool that prints `uuid.hex`)
    get the dashes of the id's layout (`ID_GROUPS`) back, counted from the start for the
    prefix and from the end for the suffix; anything else is kept as typed."""
    text = typed.strip().lower().strip("-")
    if "-" in text or not set(text) <= HEX_DIGITS:
        return text, text
    return _dashed(text, ID_GROUPS), _dashed(text[::-1], ID_GROUPS[::-1])[::-1]


def dashed_id(digits: str) -> str:
    """A job id as printed from its 32 hex digits (`uuid.UUID(...).hex`, a `uuid`'s 16
    bytes as hex): the dashes of `ID_GROUPS` put in."""
    return _dashed(digits, ID_GROUPS)


def _dashed(digits: str, groups: tuple[int, ...]) -> str:
    """`digits` cut into `groups` from the start, joined by dashes."""
    parts = []
    for size in groups:
        if not digits:
            break
        parts.append(digits[:size])
        digits = digits[size:]
    if digits:  # longer than an id: kept whole, it matches nothing
        parts.append(digits)
    return "-".join(parts)


def new_worker_id() -> str:
    """`hostname-pid-random`: an operator can tell from the id where a worker ran."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


def requester(via: str) -> str:
    """Who asked for something, for the record an operator reads later (a cancel's
    `cancelled_by`): `via` (the command or call), the OS user, host and pid."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (some containers)
        user = f"uid {os.getuid()}"
    return f"{via} by {user}@{socket.gethostname()} (pid {os.getpid()})"
