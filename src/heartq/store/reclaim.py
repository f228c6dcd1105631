"""Planning a reclaim, shared by every backend: crash context and fate of each job.

A backend selects the running rows to reclaim (expired leases, a dead worker's jobs, a
restarted name's jobs, one crashed child) with the columns of `RECLAIM_COLUMNS`, calls
`plan()`, then applies the returned finish documents with its fenced finish statement in
the same transaction. Only this module decides what a crash context holds, and which
namesakes a restarted worker may reclaim from (`sort_namesakes`).

A job requeued after its first crash keeps its place in line (its `run_at`) and may run
at once: its worker died, the job waited long enough. From its second crash on it waits
its retry backoff (`outcomes.after_crash`).

An attempt given up because its worker could not reach the database (`INFRASTRUCTURE`
detections: self-fencing) ends `interrupted`, not `crashed`: the job was not at fault,
so the attempt is not counted against `max_retries` and the job keeps its place in line.
`MAX_INTERRUPTIONS` bounds such attempts separately, so nothing loops forever.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from heartq import outcomes
from heartq.lifecycle.retry import DEFAULT_RETRY_BACKOFF_MAX
from heartq.model import DetectedBy, JobStatus, LiveNamesake, Outcome, Reclaimed
from heartq.store.documents import finish_doc
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
    "interruptions",
    "cancel_requested",
)

INFRASTRUCTURE = frozenset({DetectedBy.SELF_FENCE})
"""Detections that mean the database, not the job, failed the attempt: its worker could
not renew the lease and gave the attempt up itself."""
MAX_INTERRUPTIONS = 20
"""A job whose attempts were interrupted this many times (its workers kept losing the
database while running it) is dead: an outage is bounded, an endless loop is not."""


def plan(
    rows: Sequence[Any],
    now: float | datetime,
    detected_by: str,
    reason: str,
    extra: Mapping[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], list[Reclaimed]]:
    """Finish documents (for the backend's fenced finish statement) and what they mean.

    `rows` are mappings (or `sqlite3.Row`s) with the columns of `RECLAIM_COLUMNS`."""
    interrupted = detected_by in INFRASTRUCTURE
    decide = _interrupt if interrupted else _decide
    outcome = Outcome.INTERRUPTED if interrupted else Outcome.CRASHED
    decided = [decide(row, crash_context(row, now, detected_by, reason, extra)) for row in rows]
    docs = [
        finish_doc(
            r.job_id,
            r.execution_id,
            status=str(r.status),
            outcome=outcome.value,
            error=f"{reason} (detected by {detected_by})",
            delay=r.retry_delay,
            dead_reason=r.dead_reason,
            crash=r.crash,
            keep_place=r.status is JobStatus.QUEUED and r.retry_delay == 0.0,
        )
        for r in decided
    ]
    return docs, decided


def detector(observer: str | None) -> dict[str, Any] | None:
    """What a crash context says of who found the crash: `detector`, the id of the worker
    whose maintenance pass found it (none for an operator's `heartq reap`)."""
    return None if observer is None else {"detector": observer}


def crash_context(
    row: Any,
    now: float | datetime,
    detected_by: str,
    reason: str,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """What is kept of a crashed attempt: who held it, when it was last heard of, when
    and how its crash was found, and why."""
    return {
        "worker_id": row["worker_id"],
        "last_heartbeat_at": iso(row["worker_heartbeat_at"] or row["heartbeat_at"]),
        "job_heartbeat_at": iso(row["heartbeat_at"]),
        "lease_expires_at": iso(row["lease_expires_at"]),
        "detected_at": iso(now),
        "detected_by": detected_by,
        "reason": reason,
        **(extra or {}),
    }


def _decide(row: Any, crash: dict[str, Any]) -> Reclaimed:
    """The fate of one crashed attempt's job: cancelled (its cancel was requested),
    retried after a backoff, or dead once its retries are spent."""
    if row["cancel_requested"]:  # the user asked to stop it: do not run it again
        status, delay, dead_reason = JobStatus.CANCELLED, 0.0, None
    else:
        # crashes since the last replay: never more than the attempts counted since
        crashes = min(row["crashes"] + 1, row["attempts"])
        status, delay, dead_reason = outcomes.after_crash(
            row["attempts"],
            row["max_retries"],
            row["retry_backoff"],
            row["retry_backoff_max"],
            crashes,
            crash,
        )
        if not math.isfinite(delay):  # a row stored before backoffs were checked
            delay = DEFAULT_RETRY_BACKOFF_MAX
    return _reclaimed(row, crash, status, delay, dead_reason)


def _interrupt(row: Any, crash: dict[str, Any]) -> Reclaimed:
    """The fate of an interrupted attempt's job: cancelled (its cancel was requested),
    requeued at once in its place (the attempt is not counted), or dead once its attempts
    were interrupted more than `MAX_INTERRUPTIONS` times."""
    interruptions = row["interruptions"] + 1
    if row["cancel_requested"]:
        return _reclaimed(row, crash, JobStatus.CANCELLED, 0.0, None)
    if interruptions > MAX_INTERRUPTIONS:
        reason = (
            f"interrupted {interruptions} times: its workers kept losing the database; "
            f"last: {crash.get('reason')} on worker {crash.get('worker_id')}"
        )
        return _reclaimed(row, crash, JobStatus.DEAD, 0.0, reason)
    return _reclaimed(row, crash, JobStatus.QUEUED, 0.0, None)


def _reclaimed(
    row: Any, crash: dict[str, Any], status: JobStatus, delay: float, dead_reason: str | None
) -> Reclaimed:
    return Reclaimed(
        job_id=row["id"],
        execution_id=row["execution_id"],
        worker_id=row["worker_id"],
        task=row["task"],
        status=status,
        attempts=row["attempts"],
        crash=crash,
        retry_delay=delay,
        dead_reason=dead_reason,
        queue=str(row["queue"]),
    )


def sort_namesakes(
    rows: Sequence[Any], lock_free: Callable[[Any], bool | None]
) -> tuple[list[str], list[LiveNamesake], list[str]]:
    """Startup reconciliation, shared by every backend: of the other workers of a name
    (rows with `id`, `heartbeat_age` and `silent`, past their staleness threshold), the
    ids of those that are gone (liveness lock free for the store's grace, or silent),
    those alive, and those suspected (`lock_free` says None: free, not yet for the
    grace). A live namesake (two processes given the same `--name`) keeps its jobs."""
    gone: list[str] = []
    alive: list[LiveNamesake] = []
    suspected: list[str] = []
    for row in rows:
        free = lock_free(row)
        if row["silent"] or free:
            gone.append(str(row["id"]))
        elif free is None:
            suspected.append(str(row["id"]))
        else:
            alive.append(LiveNamesake(str(row["id"]), round(float(row["heartbeat_age"]), 3)))
    return gone, alive, suspected
