"""Planning a reclaim, shared by every backend: the store's side of a crashed attempt.

A backend selects the running rows to reclaim (expired leases, a dead worker's jobs, a
restarted name's jobs, one crashed child) with the columns of `RECLAIM_COLUMNS`, calls
`plan()`, then applies the returned finish documents with its fenced finish statement in
the same transaction. What the crash context holds and what becomes of each job is
`heartq.lifecycle.crash`; this module turns rows into its questions and its answers
into documents. It also decides which namesakes a restarted worker may
reclaim from (`sort_namesakes`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from heartq.lifecycle.crash import HeldJob, after, crash_context, ended_by
from heartq.model import JobStatus, LiveNamesake, Outcome, Reclaimed
from heartq.store import records
from heartq.store.documents import finish_doc

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
    "claimed_ahead",
    "started_at",
    "args",
    "meta",
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
    outcome = ended_by(detected_by)
    docs: list[dict[str, Any]] = []
    decided: list[Reclaimed] = []
    for row in rows:
        if row["claimed_ahead"]:
            given_back = _unstarted(row, now, detected_by, reason, extra)
            decided.append(given_back)
            docs.append(_unstarted_doc(given_back))
            continue
        r = _decide(row, outcome, now, detected_by, reason, extra)
        decided.append(r)
        docs.append(
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
        )
    return docs, decided


def _crash_of(
    row: Any,
    now: float | datetime,
    detected_by: str,
    reason: str,
    extra: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The crash context of a reclaimed row: what its worker and its lease last said."""
    return crash_context(
        worker_id=row["worker_id"],
        worker_heartbeat_at=row["worker_heartbeat_at"],
        job_heartbeat_at=row["heartbeat_at"],
        lease_expires_at=row["lease_expires_at"],
        detected_at=now,
        detected_by=detected_by,
        reason=reason,
        extra=extra,
    )


def _unstarted(
    row: Any,
    now: float | datetime,
    detected_by: str,
    reason: str,
    extra: Mapping[str, Any] | None,
) -> Reclaimed:
    """A job its worker claimed ahead and never started (docs/DESIGN.md, "Claim ahead"):
    back in the queue in its place, its attempt not counted and no crash recorded (its
    code never ran, so it cannot be what killed the worker); 'cancelled' if its cancel
    was requested. The crash context is kept for the log only."""
    crash = _crash_of(row, now, detected_by, f"{reason} (claimed ahead, not started)", extra)
    cancelled = bool(row["cancel_requested"])
    return Reclaimed(
        job_id=row["id"],
        execution_id=row["execution_id"],
        worker_id=row["worker_id"],
        task=row["task"],
        status=JobStatus.CANCELLED if cancelled else JobStatus.QUEUED,
        attempts=max(int(row["attempts"]) - 1, 0),
        crash=crash,
        outcome=Outcome.RELEASED,
        **_job_of(row),
    )


def _unstarted_doc(job: Reclaimed) -> dict[str, Any]:
    """The fenced finish of an unstarted job: outcome `released` (the finish statement
    counts no attempt for it, as for a release at shutdown), no crash, its place kept;
    the statement ends it 'cancelled' instead if its cancel was requested."""
    return finish_doc(
        job.job_id,
        job.execution_id,
        status=JobStatus.QUEUED.value,
        outcome=Outcome.RELEASED.value,
        keep_place=True,  # no error: the job keeps that of its last real attempt
    )


def _decide(
    row: Any,
    outcome: Outcome,
    now: float | datetime,
    detected_by: str,
    reason: str,
    extra: Mapping[str, Any] | None,
) -> Reclaimed:
    """One row's crash context and verdict (`heartq.lifecycle`), as a `Reclaimed`."""
    crash = _crash_of(row, now, detected_by, reason, extra)
    held = HeldJob(
        attempts=row["attempts"],
        max_retries=row["max_retries"],
        retry_backoff=row["retry_backoff"],
        retry_backoff_max=row["retry_backoff_max"],
        crashes=row["crashes"],
        interruptions=row["interruptions"],
        cancel_requested=bool(row["cancel_requested"]),
        backoff=records.backoff(row["retry_rules"]),
    )
    verdict = after(held, outcome, crash)
    return Reclaimed(
        job_id=row["id"],
        execution_id=row["execution_id"],
        worker_id=row["worker_id"],
        task=row["task"],
        status=verdict.status,
        attempts=row["attempts"],
        crash=crash,
        retry_delay=verdict.retry_delay,
        dead_reason=verdict.dead_reason,
        outcome=outcome,
        **_job_of(row),
    )


def _job_of(row: Any) -> dict[str, Any]:
    """What a reclaimed row says of its job and attempt beyond the verdict: its queue, its
    attempt's start, and its arguments and meta as stored (for the crash hooks)."""
    return {
        "queue": str(row["queue"]),
        "started_at": row["started_at"],
        "args_json": row["args"],
        "meta_json": row["meta"],
    }


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
