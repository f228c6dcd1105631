"""An attempt someone else ended: how it ended, what becomes of its job, and what is
kept of it (its crash context).

A reclaimer (the lease reclaimer, a liveness probe, a worker monitor, startup reconciliation, the
worker whose child died, a worker handing back what it stopped trusting) closes an
attempt its worker can no longer report. How it ended depends on who found it
(`ended_by`); what becomes of the job, on its policy and its history (`after`).

A crashed attempt counts against `max_retries`. A first crash is retried at once and the
job keeps its place in line: its worker died, not the job (an OOM kill, a redeploy, a
lost host), and the job has waited long enough. From the second crash on the job may be
what kills its workers, so the retry waits the usual backoff.

An untrusted attempt (its worker could not reach the database: `INFRASTRUCTURE`
detections, self-fencing) ends `interrupted`, not `crashed`: the job was not at fault,
so the attempt is not counted against `max_retries` and the job keeps its place in line.
`MAX_INTERRUPTIONS` bounds such attempts separately, so nothing loops forever.

Whichever way it ended, a job whose cancel was requested is cancelled, not run again.

Every reclaimer, on every backend, stores the same crash context with the execution it
closes (`crash_context`; `heartq jobs show` and the dashboard print it; the chaos checks
read it): who held the attempt, when it was last heard of, when and how its end was
found, and why. A child process's exit adds its pid, exit code and signal (`extra`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from heartq.lifecycle.fate import dead_reason
from heartq.lifecycle.retry import (
    DEFAULT_BACKOFF,
    DEFAULT_RETRY_BACKOFF_MAX,
    Backoff,
    RetryDecision,
    plan_retry,
)
from heartq.model import DetectedBy, JobStatus, Outcome
from heartq.timeutil import iso

INFRASTRUCTURE = frozenset({DetectedBy.SELF_FENCE})
"""Detections that mean the database, not the job, failed the attempt: its worker could
not renew the lease, stopped trusting it and handed the attempt back itself."""
MAX_INTERRUPTIONS = 20
"""A job whose attempts were interrupted this many times (its workers kept losing the
database while running it) is dead: an outage is bounded, an endless loop is not."""
Moment = float | datetime | None
"""A time as a backend reads it: seconds since the epoch, or a datetime."""


@dataclass(frozen=True)
class HeldJob:
    """A running job as a reclaimer reads it: its retry policy (`backoff`: its task's
    declared shape of waits) and its history so far (`crashes` since its last replay and
    `interruptions`, the ending attempt excluded)."""

    attempts: int
    max_retries: int
    retry_backoff: float
    retry_backoff_max: float
    crashes: int
    interruptions: int
    cancel_requested: bool
    backoff: Backoff = DEFAULT_BACKOFF


@dataclass(frozen=True)
class Verdict:
    """What becomes of a reclaimed job: queued again (after `retry_delay` seconds; 0 keeps
    its place in line), dead (with its `dead_reason`), or cancelled."""

    status: JobStatus
    retry_delay: float = 0.0
    dead_reason: str | None = None


def ended_by(detected_by: str) -> Outcome:
    """How an attempt someone else closed ended: `INTERRUPTED` when its own worker stopped
    trusting it for want of a database (`INFRASTRUCTURE`), `CRASHED` otherwise."""
    return Outcome.INTERRUPTED if detected_by in INFRASTRUCTURE else Outcome.CRASHED


def after(job: HeldJob, outcome: Outcome, crash: Mapping[str, Any]) -> Verdict:
    """The verdict on a job whose attempt ended `outcome` (`ended_by`), with its crash
    context `crash`: cancelled if its cancel was requested (the user asked to stop it:
    it is not run again, whatever ended the attempt), else as `after_interruption` or
    `after_crash` say."""
    if job.cancel_requested:
        return Verdict(JobStatus.CANCELLED)
    if outcome is Outcome.INTERRUPTED:
        return after_interruption(job, crash)
    return after_crash(job, crash)


def after_crash(job: HeldJob, crash: Mapping[str, Any]) -> Verdict:
    """A crashed attempt's job (no cancel requested): retried (at once after a first
    crash, after the backoff from the second), or dead once its retries are spent."""
    # crashes since the last replay: never more than the attempts counted since
    crashes = min(job.crashes + 1, job.attempts)
    plan = plan_retry(
        job.attempts,
        job.max_retries,
        job.retry_backoff,
        job.retry_backoff_max,
        backoff=job.backoff,
    )
    if plan.decision is RetryDecision.RETRY:
        delay = 0.0 if crashes <= 1 else plan.delay
        if not math.isfinite(delay):  # a row stored before backoffs were checked
            delay = DEFAULT_RETRY_BACKOFF_MAX
        return Verdict(JobStatus.QUEUED, delay)
    summary = f"{crash.get('reason', 'crashed')} on worker {crash.get('worker_id')}"
    return Verdict(
        JobStatus.DEAD,
        dead_reason=dead_reason(Outcome.CRASHED, job.attempts, summary, crashes=crashes),
    )


def after_interruption(job: HeldJob, crash: Mapping[str, Any]) -> Verdict:
    """An interrupted attempt's job (no cancel requested): queued again at once in its place
    (the attempt is not counted), or dead once its attempts were interrupted more than
    `MAX_INTERRUPTIONS` times."""
    interruptions = job.interruptions + 1
    if interruptions > MAX_INTERRUPTIONS:
        reason = (
            f"interrupted {interruptions} times: its workers kept losing the database; "
            f"last: {crash.get('reason')} on worker {crash.get('worker_id')}"
        )
        return Verdict(JobStatus.DEAD, dead_reason=reason)
    return Verdict(JobStatus.QUEUED)


def detector(observer: str | None) -> dict[str, Any] | None:
    """What a crash context says of who found the crash: `detector`, the id of the worker
    whose maintenance pass found it (none for an operator's `heartq reclaim`)."""
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
