"""Rows to the public JSON shapes of docs/INTERFACE.md (`heartq jobs show --json`, `get_job`).

Backend-neutral: a backend hands over mappings with its own time type (epoch floats or
datetimes) and JSON columns as text or already decoded.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from heartq import rates
from heartq.timeutil import iso


def json_value(value: Any) -> Any:
    """A JSON column's value: decoded if the driver handed over text (both backends
    return JSON columns as text, exactly as stored), as is otherwise."""
    if isinstance(value, str | bytes):
        return json.loads(value)
    return value


def execution_dict(row: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "execution_id": row["execution_id"],
        "worker_id": row["worker_id"],
        "started_at": iso(row["started_at"]),
        "ended_at": iso(row["ended_at"]),
        "outcome": row["outcome"],
        "error": row["error"],
        "crash": json_value(row["crash"]),
    }


def job_dict(
    row: Mapping[str, Any], executions: Iterable[Mapping[str, Any]] | None = None
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "id": row["id"],
        "task": row["task"],
        "queue": row["queue"],
        "status": row["status"],
        "args": json_value(row["args"]),
        "priority": row["priority"],
        "attempts": row["attempts"],
        "max_retries": row["max_retries"],
        "retry_backoff": row["retry_backoff"],
        "retry_backoff_max": row["retry_backoff_max"],
        "run_at": iso(row["run_at"]),
        "created_at": iso(row["created_at"]),
        "started_at": iso(row["started_at"]),
        "finished_at": iso(row["finished_at"]),
        "worker_id": row["worker_id"],
        "execution_id": row["execution_id"],
        "lease_expires_at": iso(row["lease_expires_at"]),
        "heartbeat_at": iso(row["heartbeat_at"]),
        "progress": {
            "value": row["progress_value"],
            "stage": row["progress_stage"],
            "message": row["progress_message"],
        },
        "checkpoint": json_value(row["checkpoint"]),
        "result": json_value(row["result"]),
        "error": row["error"],
        "dead_reason": row["dead_reason"],
        "cancel_requested": bool(row["cancel_requested"]),
        # running and claimed ahead: its worker holds it in its buffer, not started yet
        "claimed_ahead": row["status"] == "running" and bool(row["claimed_ahead"]),
        "cancelled_by": row["cancelled_by"],
        "unique_key": row["unique_key"],
        "schedule": row["schedule"],
        "concurrency_key": row["concurrency_key"],
        "concurrency_limit": row["concurrency_limit"],
        "rate_key": row["rate_key"],
        "rate_limit": (
            None
            if row["rate_key"] is None
            else rates.format_rate(int(row["rate_limit"]), float(row["rate_period"]))
        ),
        "meta": json_value(row["meta"]) or {},
        "waiting_for": row["waiting_for"],
        "on_dependency_failure": row["on_dependency_failure"],
        "dependency_results": bool(row["dependency_results"]),
    }
    if executions is not None:
        doc["executions"] = [execution_dict(e) for e in executions]
    return doc


def linked_job_dict(row: Mapping[str, Any]) -> dict[str, Any]:
    """One of a job's dependencies or dependents (`get_job`): its id, task and status
    (None: the job was pruned or purged since), and how the dependency ended as its
    dependent's release counted it (`ended`: None while it has not)."""
    return {"id": row["id"], "task": row["task"], "status": row["status"], "ended": row["ended"]}


def worker_dict(row: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "name": row["name"],
        "hostname": row["hostname"],
        "pid": row["pid"],
        "status": row["status"],
        "queues": json_value(row["queues"]),
        "concurrency": row["concurrency"],
        "started_at": iso(row["started_at"]),
        "last_heartbeat_at": iso(row["last_heartbeat_at"]),
        "stopped_at": iso(row["stopped_at"]),
        "running": row["running"],
        "claimed_ahead": row["claimed_ahead"],
        "abandoned": row["abandoned"],
    }
