"""The JSON documents a backend's batch statements read, built in one place.

Claim, heartbeat, finish and enqueue take their whole batch as one JSON parameter. Every
backend builds those documents here, so what is validated or cleaned on the way in
(names checked, NUL in free text escaped) is the same whatever the database.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from heartq import outcomes
from heartq.ids import new_job_id
from heartq.payload import check_name, clean_text
from heartq.store.interface import NewJob, Renewal


def new_job_doc(job: NewJob) -> dict[str, Any]:
    """One job to insert; raises `ConfigError` for a task or queue name no backend takes."""
    return {
        "id": job.id or new_job_id(),
        "task": check_name("task", job.task),
        "queue": check_name("queue", job.queue),
        "args": job.args_json,
        "priority": job.priority,
        "delay": max(0.0, job.delay),
        "max_retries": job.max_retries,
        "retry_backoff": job.retry_backoff,
        "retry_backoff_max": job.retry_backoff_max,
    }


def renewal_doc(renewal: Renewal) -> dict[str, Any]:
    progress = renewal.progress
    return {
        "id": renewal.lease.job_id,
        "eid": renewal.lease.execution_id,
        "hp": progress is not None,
        "pv": progress.value if progress else None,
        "ps": clean_text(progress.stage) if progress else None,
        "pm": clean_text(progress.message) if progress else None,
    }


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
    """One finished attempt, as the fenced finish statement reads it."""
    return {
        "id": job_id,
        "eid": execution_id,
        "status": status,
        "outcome": outcome,
        "result": result,
        "error": outcomes.clip_error(error),
        "delay": delay,
        "dead_reason": clean_text(dead_reason),
        "crash": json.dumps(crash) if crash is not None else None,
    }
