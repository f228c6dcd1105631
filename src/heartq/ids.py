"""Identifiers: time-ordered job ids and readable worker ids."""

from __future__ import annotations

import os
import secrets
import socket
import time
import uuid


def new_job_id() -> str:
    """A UUIDv7-shaped id: millisecond timestamp first, so ids sort by creation time
    and inserts land at the right edge of the primary-key index."""
    ms = time.time_ns() // 1_000_000
    rand = secrets.randbits(74)
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76  # version 7
    value |= (rand >> 62) << 64  # 12 bits rand_a
    value |= 0b10 << 62  # variant
    value |= rand & ((1 << 62) - 1)
    return str(uuid.UUID(int=value))


def new_worker_id() -> str:
    """`hostname-pid-random`: an operator can tell from the id where a worker ran."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
