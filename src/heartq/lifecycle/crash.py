"""What is kept of a crashed or interrupted attempt: its crash context.

Every reclaimer, on every backend, stores the same dictionary with the execution it
closes (`heartq jobs show` and the dashboard print it; the chaos checks read it): who held
the attempt, when it was last heard of, when and how its end was found, and why. A child
process's exit adds its pid, exit code and signal (`extra`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from heartq.timeutil import iso

Moment = float | datetime | None
"""A time as a backend reads it: seconds since the epoch, or a datetime."""


def detector(observer: str | None) -> dict[str, Any] | None:
    """What a crash context says of who found the crash: `detector`, the id of the worker
    whose maintenance pass found it (none for an operator's `heartq reap`)."""
    return None if observer is None else {"detector": observer}


def crash_context(
    *,
    worker_id: str | None,
    worker_heartbeat_at: Moment,
    job_heartbeat_at: Moment,
    lease_expires_at: Moment,
    detected_at: Moment,
    detected_by: str,
    reason: str,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The crash context of one attempt. Its last sign of life is its worker's last
    heartbeat, or the job's own when the worker's is unknown."""
    return {
        "worker_id": worker_id,
        "last_heartbeat_at": iso(worker_heartbeat_at or job_heartbeat_at),
        "job_heartbeat_at": iso(job_heartbeat_at),
        "lease_expires_at": iso(lease_expires_at),
        "detected_at": iso(detected_at),
        "detected_by": detected_by,
        "reason": reason,
        **(extra or {}),
    }
