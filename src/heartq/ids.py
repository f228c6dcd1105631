"""Identifiers: time-ordered job ids and readable worker ids."""

from __future__ import annotations

import getpass
import os
import secrets
import socket
import threading
import time
import uuid

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
    return str(uuid.UUID(int=value))


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
