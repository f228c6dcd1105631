"""Planning a reclaim, shared by every backend: crash context and fate of each job.

A backend selects the running rows to reclaim (expired leases, a dead worker's jobs, a
restarted name's jobs, one crashed child) with the columns of `RECLAIM_COLUMNS`, calls
`plan()`, then applies the returned finish documents with its fenced finish statement in
the same transaction. Only this module decides what a crash context holds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from heartq import outcomes
from heartq.store.interface import Outcome, Reclaimed
from heartq.timeutil import iso

RECLAIM_COLUMNS = (
    "id",
    "execution_id",
    "worker_id",
    "task",
    "attempts",
    "max_retries",
    "retry_backoff",
    "retry_backoff_max",
    "lease_expires_at",
    "heartbeat_at",
    "worker_heartbeat_at",
    "crashes",
)


def plan(
    rows: Sequence[Any],
    now: float | datetime,
    detected_by: str,
    reason: str,
    extra: Mapping[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], list[Reclaimed]]:
    """Finish documents (for the backend's fenced finish statement) and what they mean.

    `rows` are mappings (or `sqlite3.Row`s) with the columns of `RECLAIM_COLUMNS`."""
    docs: list[dict[str, Any]] = []
    decided: list[Reclaimed] = []
    for row in rows:
        crash = {
            "worker_id": row["worker_id"],
            "last_heartbeat_at": iso(row["worker_heartbeat_at"] or row["heartbeat_at"]),
            "job_heartbeat_at": iso(row["heartbeat_at"]),
            "lease_expires_at": iso(row["lease_expires_at"]),
            "detected_at": iso(now),
            "detected_by": detected_by,
            "reason": reason,
            **(extra or {}),
        }
        status, delay, dead_reason = outcomes.after_crash(
            row["attempts"],
            row["max_retries"],
            row["retry_backoff"],
            row["retry_backoff_max"],
            row["crashes"] + 1,
            crash,
        )
        docs.append(
            finish_doc(
                row["id"],
                row["execution_id"],
                status=str(status),
                outcome=Outcome.CRASHED.value,
                error=f"{reason} (detected by {detected_by})",
                delay=delay,
                dead_reason=dead_reason,
                crash=crash,
            )
        )
        decided.append(
            Reclaimed(
                job_id=row["id"],
                execution_id=row["execution_id"],
                worker_id=row["worker_id"],
                task=row["task"],
                status=status,
                attempts=row["attempts"],
                crash=crash,
                retry_delay=delay,
                dead_reason=dead_reason,
            )
        )
    return docs, decided


def finish_doc(
    job_id: str,
    execution_id: int,
    *,
    status: str,
    outcome: str,
    result: str | None = None,
    error: str | None = None,
    delay: float = 0.0,
    dead_reason: str | None = None,
    crash: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One element of the JSON array a backend's fenced finish statement reads."""
    return {
        "id": job_id,
        "eid": execution_id,
        "status": status,
        "outcome": outcome,
        "result": result,
        "error": outcomes.clip_error(error),
        "delay": delay,
        "dead_reason": dead_reason,
        "crash": json.dumps(crash) if crash is not None else None,
    }
