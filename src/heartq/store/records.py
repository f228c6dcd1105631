"""Database rows to the records of `heartq.model`, and to the public JSON shapes of
docs/INTERFACE.md (`heartq jobs show --json`, `get_job`), shared by every backend.

A backend runs its own SQL; what its rows mean (a claimed job, a heartbeat's answers, why
a worker was reclaimed, a job as the operator reads it) is decided here once, so the
backends cannot drift apart. Rows are mappings (or `sqlite3.Row`s) with the columns the
statements of the same name return in each backend (the claim's and the finish's, read
once a job, by position: `CLAIMED_COLUMNS`, `finish_answers`), with the backend's own
time type (epoch floats or datetimes) and JSON columns as text or already decoded
(`json_value`).
What goes the other way, the documents the batch statements read, is `documents.py`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from heartq import lost_results, rates
from heartq.errors import LeaseLost
from heartq.lifecycle.retry import DEFAULT_BACKOFF, SCHEDULES, Backoff, wait_problem
from heartq.model import (
    TERMINAL_STATUSES,
    ClaimedJob,
    DeactivatedWorker,
    DependencyEnd,
    DetectedBy,
    JobEnd,
    JobStatus,
    Lease,
    QueueWait,
    Reclaimed,
    RenewStatus,
    TaskParameter,
    TaskPolicy,
)
from heartq.timeutil import iso


def json_value(value: Any) -> Any:
    """A JSON column's value: decoded if the driver handed over text (both backends
    return JSON columns as text, exactly as stored), as is otherwise."""
    if isinstance(value, (str, bytes)):  # a tuple: `str | bytes` makes a union each call
        return json.loads(value)
    return value


CLAIMED_COLUMNS = (
    "id", "task", "queue", "args", "attempts", "execution_id", "max_retries",
    "retry_backoff", "retry_backoff_max", "checkpoint", "lease_expires_at", "run_at",
    "priority", "chosen", "meta", "dependency_results", "snoozes", "expires_in",
)  # fmt: skip
"""The columns of a claimed row, in the order every claim statement of both backends
returns them: `claimed_jobs` reads them by position (a claim's rows come back as tuples,
not a dict each: 2 us a job on PostgreSQL). tests/conformance/test_claimed_columns.py
holds each statement to it."""

_ID, _RUN_AT, _PRIORITY = (CLAIMED_COLUMNS.index(c) for c in ("id", "run_at", "priority"))


def claimed_jobs(
    rows: Iterable[Sequence[Any]], sent_at: float = 0.0, worker_id: str | None = None
) -> list[ClaimedJob]:
    """The claimed jobs in claim order: best priority first, then oldest; `sent_at` is
    when the claim statement was sent (`ClaimedJob.sent_at`), `worker_id` the claimer
    (part of each lease: not read back from the rows, the claim wrote it). The rows are
    read by position, the columns of `CLAIMED_COLUMNS`. The claim's own ORDER BY
    priority DESC, run_at, id, to the id: Python compares `str` by code point, which for
    a job id (a UUID in lower case with its dashes) is the order of ids in both databases
    (PostgreSQL's `uuid`, by its bytes, since schema v44; SQLite's BINARY)."""
    ordered = sorted(rows, key=lambda r: (-r[_PRIORITY], r[_RUN_AT], r[_ID]))
    return [
        ClaimedJob(
            id=r[0],
            task=r[1],
            queue=r[2],
            args=_json_object(r[3]),
            attempt=r[4],
            execution_id=r[5],
            max_retries=r[6],
            retry_backoff=r[7],
            retry_backoff_max=r[8],
            checkpoint=None if r[9] is None else json_value(r[9]),
            lease_expires_at=r[10],
            run_at=r[11],
            chosen=r[13],
            meta=_json_object(r[14]),
            dependency_results=bool(r[15]),
            snoozes=r[16],
            expires_by=None if r[17] is None else sent_at + r[17],
            sent_at=sent_at,
            priority=r[_PRIORITY],
            worker_id=worker_id,
        )
        for r in ordered
    ]


def _json_object(text: str | None) -> dict[str, Any]:
    """A JSON object column (a job's arguments, its meta), a new `{}` without the decoder
    when it is empty or absent, as most jobs' meta and many jobs' arguments are."""
    if not text or text == "{}":
        return {}
    decoded: dict[str, Any] = json.loads(text)
    return decoded


class FinishAnswers:
    """What a `FINISH` changed (`finish_answers`)."""

    __slots__ = ("awaited", "deferred", "failed_dependents", "landed", "with_dependents")

    def __init__(self) -> None:
        self.landed: set[Lease] = set()
        """The leases whose job it ended."""
        self.deferred: set[Lease] = set()
        """Those it left alone, their job having dependents (`defer`)."""
        self.awaited: list[str] = []
        """The ended jobs someone waits for (`awaited_ends`)."""
        self.with_dependents: list[str] = []
        """The ended jobs with dependents to settle (`ended_with_dependents`)."""
        self.failed_dependents = False
        """Whether one of those did not succeed (`failed_with_dependents`)."""


_FAILED = TERMINAL_STATUSES - {JobStatus.SUCCEEDED}


def finish_answers(rows: Iterable[Sequence[Any]]) -> FinishAnswers:
    """A `FINISH`'s rows (by position: id, execution_id, status, awaited, has_dependents,
    deferred, in both backends), read in one pass: a finish of a hundred jobs without
    waiters or dependents costs a lease each and nothing more."""
    answers = FinishAnswers()
    landed = answers.landed
    for job_id, execution_id, status, awaited, has_dependents, deferred in rows:
        if deferred:
            answers.deferred.add(Lease(job_id, execution_id))
            continue
        landed.add(Lease(job_id, execution_id))
        if (awaited or has_dependents) and status in TERMINAL_STATUSES:
            if awaited:
                answers.awaited.append(job_id)
            if has_dependents:
                answers.with_dependents.append(job_id)
                answers.failed_dependents |= status in _FAILED
    return answers


def leases(rows: Iterable[Any]) -> set[Lease]:
    """The `(id, execution_id)` of rows a fenced statement changed (what is compared
    with the leases sent: a lease's worker is not part of its identity)."""
    return {Lease(r["id"], r["execution_id"]) for r in rows}


def renew_answers(sent: Iterable[Lease], rows: Iterable[Any]) -> dict[Lease, RenewStatus]:
    """Per lease sent (a renewal, a pulse's report): renewed (it landed), cancel
    requested, or lost (no row came back for it)."""
    answers = {lease: RenewStatus.LOST for lease in sent}
    for row in rows:
        answers[Lease(row["id"], row["execution_id"])] = _renewed(row)
    return answers


def checkpoint_answer(lease: Lease, row: Any | None) -> RenewStatus:
    if row is None:
        raise LeaseLost(lease.job_id, lease.execution_id)
    return _renewed(row)


def _renewed(row: Any) -> RenewStatus:
    return RenewStatus.CANCEL_REQUESTED if row["cancel_requested"] else RenewStatus.RENEWED


def stale_reason(detected_by: str, heartbeat_age: float) -> str:
    if detected_by == DetectedBy.LIVENESS_LOCK:
        return "worker process gone (liveness lock free)"
    return f"worker stale: no heartbeat for {heartbeat_age:.1f} s"


def deactivated_worker(worker: Any, reclaimed: Sequence[Reclaimed]) -> DeactivatedWorker:
    return DeactivatedWorker(
        worker["id"], worker["name"], float(worker["heartbeat_age"]), tuple(reclaimed)
    )


def queue_wait(row: Any, now: float, oldest_job_id: str | None) -> QueueWait:
    oldest = row["oldest_run_at"]
    age = None if oldest is None else max(0.0, now - oldest)
    return QueueWait(age, oldest_job_id, int(row["scheduled"] or 0))


def rate_usage(row: Any) -> dict[str, Any]:
    """One rate key's use (`RATE_USAGE`), as `heartq stats` and the dashboard show it."""
    wait = row["next_start_in"]
    return {
        "key": row["key"],
        "limit": rates.format_rate(int(row["n"]), float(row["period"])),
        "count": int(row["n"]),
        "period": float(row["period"]),
        "started": int(row["started"]),
        "next_start_in": None if wait is None else max(0.0, float(wait)),
        "waiting": int(row["waiting"] or 0),
        "queued": int(row["queued"] or 0),
        "running": int(row["running"] or 0),
    }


def task_policy(row: Any) -> TaskPolicy:
    return TaskPolicy(
        name=row["name"],
        queue=row["queue"],
        priority=row["priority"],
        max_retries=row["max_retries"],
        retry_backoff=row["retry_backoff"],
        retry_backoff_max=row["retry_backoff_max"],
        timeout=row["timeout"],
        heartbeat_timeout=row["heartbeat_timeout"],
        declared_at=row["declared_at"],
        declared_by=row["declared_by"],
        parameters=task_parameters(row["parameters"]),
        rate_limit=row["rate_limit"],
        rate_key=row["rate_key"],
        **retry_rules(row["retry_rules"]),
        **uniqueness(row["uniqueness"]),
        expires=_expiry(row["expires"]),
    )


def _expiry(value: Any) -> float | None:
    """A declaration's `expires` column: seconds, or None (none declared, a worker of a
    version before task expiries, or a value no duration check would pass)."""
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if 0 < value < float("inf") else None


def uniqueness(value: Any) -> dict[str, Any]:
    """A declaration's `uniqueness` column as `TaskPolicy` fields: `unique` and its
    `unique_for`; not unique when it has none (a task that keys nothing, a worker of an
    older version) or holds what this version cannot read."""
    try:
        doc = json_value(value)
    except ValueError:
        return {}
    if not isinstance(doc, dict):
        return {}
    window = doc.get("unique_for")
    if window is not None and wait_problem(window) is not None:
        return {}
    return {"unique": True, "unique_for": None if window is None else float(window)}


def retry_rules(value: Any) -> dict[str, Any]:
    """A declaration's `retry_rules` column as `TaskPolicy` fields: the defaults when it
    has none (a task that chose none, a worker of an older version) or holds what this
    version cannot read (the defaults are what such a worker would apply)."""
    try:
        doc = json_value(value)
    except ValueError:
        return {}
    if not isinstance(doc, dict):
        return {}
    schedule, jitter = doc.get("schedule"), doc.get("jitter")
    retry_on, dont_retry_on = doc.get("retry_on"), doc.get("dont_retry_on")
    intervals, delay = doc.get("intervals"), doc.get("delay", False)
    if not (
        schedule in SCHEDULES
        and isinstance(jitter, bool)
        and (retry_on is None or _names(retry_on))
        and _names(dont_retry_on)
        and (intervals is None or _waits(intervals))
        and isinstance(delay, bool)
    ):
        return {}
    return {
        "retry_schedule": schedule,
        "retry_jitter": jitter,
        "retry_on": None if retry_on is None else tuple(retry_on),
        "dont_retry_on": tuple(dont_retry_on or ()),
        "retry_intervals": None if intervals is None else tuple(map(float, intervals)),
        "retry_delay": delay,
    }


def _names(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(name, str) for name in value)


def _waits(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(wait_problem(w) is None for w in value)


def backoff(value: Any) -> Backoff:
    """The shape of waits a reclaimed job's task declared (its `retry_rules` column)."""
    rules = retry_rules(value)
    if not rules:
        return DEFAULT_BACKOFF
    return Backoff(rules["retry_schedule"], rules["retry_jitter"], rules["retry_intervals"])


def task_parameters(value: Any) -> tuple[TaskParameter, ...] | None:
    """A declaration's `parameters` column: None when it has none (a worker of an older
    version declared the task) or holds what this version cannot read (then nothing is
    checked, rather than an enqueue refused for a reason nobody can see)."""
    try:
        decoded = json_value(value)
    except ValueError:
        return None
    if not isinstance(decoded, list):
        return None
    parameters = []
    for item in decoded:
        if not isinstance(item, dict):
            return None
        name, kind, has_default = item.get("name"), item.get("kind"), item.get("has_default")
        if not (isinstance(name, str) and isinstance(kind, str) and isinstance(has_default, bool)):
            return None
        parameters.append(TaskParameter(name, kind, has_default))
    return tuple(parameters)


def awaited_ends(rows: Iterable[Any]) -> list[str]:
    """The jobs among changed rows that someone waits for and that have ended."""
    return [r["id"] for r in rows if r["awaited"] and r["status"] in TERMINAL_STATUSES]


def dependency_end(row: Any) -> DependencyEnd:
    """A dependency as `DEPENDENCY_RESULTS` reads it. One whose job is gone although its
    edge was counted a success (pruned by retention since, or before the edge was
    written) lost its result with it."""
    gone = row["status"] is None and row["ended"] == JobStatus.SUCCEEDED
    return DependencyEnd(
        job_id=row["id"],
        status=None if row["status"] is None else JobStatus(row["status"]),
        result=json_value(row["result"]),
        pending=bool(row["pending"]),
        as_value=bool(row["as_value"]),
        lost=lost_results.PRUNED if gone else row["lost"],
    )


def job_end(job_id: str, row: Any) -> JobEnd:
    """A job's end as `JOB_END` reads it: with, for a blocked job, the dead job that
    holds it (`holder`)."""
    held_by = None
    if row["holder"] is not None:
        held_by = JobEnd(
            job_id=row["holder"],
            status=JobStatus.DEAD,
            error=row["holder_error"],
            dead_reason=row["holder_dead_reason"],
        )
    return JobEnd(
        job_id=job_id,
        status=JobStatus(row["status"]),
        result=json_value(row["result"]),
        error=row["error"],
        dead_reason=row["dead_reason"],
        result_pending=bool(row["result_pending"]),
        held_by=held_by,
        cancelled_by=row["cancelled_by"],
        result_lost=row["result_lost"],
    )


# -- the public JSON shapes ---------------------------------------------------------------
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
        "snoozes": row["snoozes"],
        "max_retries": row["max_retries"],
        "retry_backoff": row["retry_backoff"],
        "retry_backoff_max": row["retry_backoff_max"],
        "run_at": iso(row["run_at"]),
        "created_at": iso(row["created_at"]),
        "started_at": iso(row["started_at"]),
        "finished_at": iso(row["finished_at"]),
        "worker_id": row["worker_id"],
        "execution_id": row["execution_id"],
        # the attempt's effective lease and last sign of life, which every read of a job
        # joins from its worker's row (`EFFECTIVE_LEASE`, `EFFECTIVE_BEAT`)
        "lease_expires_at": iso(row["effective_lease"]),
        "heartbeat_at": iso(row["effective_heartbeat"]),
        "progress": {
            "value": row["progress_value"],
            "stage": row["progress_stage"],
            "message": row["progress_message"],
        },
        "checkpoint": json_value(row["checkpoint"]),
        "result": json_value(row["result"]),
        "result_lost": row["result_lost"],
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
        "fair_key": row["fair_key"],
        "fair_weight": (
            None if row["fair_key"] is None else float(row["fair_weight"] or 1.0)
        ),
        "meta": json_value(row["meta"]) or {},
        "expires_at": iso(row["expires_at"]),
        "waiting_for": row["waiting_for"],
        "holders": row["holders"],
        "on_dependency_failure": row["on_dependency_failure"],
        "dependency_results": bool(row["dependency_results"]),
    }
    if executions is not None:
        doc["executions"] = [execution_dict(e) for e in executions]
    return doc


def linked_job_dict(row: Mapping[str, Any]) -> dict[str, Any]:
    """One of a job's dependencies or dependents (`get_job`): its id, task and status
    (None: the job was pruned or purged since), how the dependency ended as its
    dependent's settling counted it (`ended`: None while it has not), and whether the
    dependency holds its dependent blocked (`holds`: it is dead, or blocked itself)."""
    return {
        "id": row["id"], "task": row["task"], "status": row["status"], "ended": row["ended"],
        "holds": bool(row["holds"]),
    }  # fmt: skip


def holder_dict(row: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The dead job at the root of what blocks a job (`get_job`'s `blocked_by`): its id,
    task, error and why it died; None for a job that is not blocked."""
    if row is None:
        return None
    return {
        "id": row["id"], "task": row["task"], "error": row["error"],
        "dead_reason": row["dead_reason"],
    }  # fmt: skip


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
