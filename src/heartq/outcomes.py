"""From "how an attempt ended" to "what happens to the job next".

The worker's completer and every backend's reclaimers call these, so a job that raised,
timed out or crashed its worker is judged by one set of rules (and `retry.plan_retry`).
"""

from __future__ import annotations

from typing import Any

from heartq.lifecycle.error_text import clip_error, error_summary
from heartq.lifecycle.retry import RetryDecision, plan_retry
from heartq.model import ClaimedJob, Finish, JobStatus, Outcome


def succeeded(job: ClaimedJob, result_json: str | None) -> Finish:
    return Finish(job.lease, Outcome.SUCCEEDED, JobStatus.SUCCEEDED, result_json=result_json)


def cancelled(job: ClaimedJob, error: str | None = None) -> Finish:
    return Finish(
        job.lease, Outcome.CANCELLED, JobStatus.CANCELLED, error=clip_error(error or "cancelled")
    )


def failed(
    job: ClaimedJob,
    outcome: Outcome,
    error: str,
    *,
    permanent: bool = False,
    crash: dict[str, Any] | None = None,
) -> Finish:
    """An attempt that raised (`FAILED`), overran its timeout (`TIMED_OUT`) or whose child
    process died (`CRASHED`): retry with backoff, or dead once retries are spent."""
    plan = plan_retry(
        job.attempt, job.max_retries, job.retry_backoff, job.retry_backoff_max, permanent=permanent
    )
    error = clip_error(error) or ""
    if plan.decision is RetryDecision.RETRY:
        return Finish(
            job.lease, outcome, JobStatus.QUEUED, error=error, retry_delay=plan.delay, crash=crash
        )
    return Finish(
        job.lease,
        outcome,
        JobStatus.DEAD,
        error=error,
        dead_reason=dead_reason(outcome, job.attempt, error, permanent=permanent),
        crash=crash,
    )


def dead_reason(
    outcome: Outcome, attempts: int, error: str | None, *, permanent: bool = False, crashes: int = 0
) -> str:
    """One line an operator reads in `heartq dlq list`: why this job stopped retrying."""
    last = error_summary(error)
    if permanent:
        return f"permanent failure: {last}" if last else "permanent failure"
    if outcome is Outcome.CRASHED and crashes >= attempts:
        return f"crashed {crashes} workers in {attempts} attempts; last: {last}"
    if outcome is Outcome.CRASHED:
        return f"retries exhausted after {attempts} attempts ({crashes} crashed); last: {last}"
    if outcome is Outcome.TIMED_OUT:
        return f"timed out on the last of {attempts} attempts; {last}"
    return f"failed {attempts} attempts; last error: {last}"


def after_crash(
    attempts: int,
    max_retries: int,
    retry_backoff: float,
    retry_backoff_max: float,
    crashes: int,
    crash: dict[str, Any],
) -> tuple[JobStatus, float, str | None]:
    """For reclaimers: `(next status, retry delay, dead reason)` of a crashed attempt.

    `crashes` counts crashed executions including this one. A first crash is retried at
    once: its worker died, not the job (an OOM kill, a redeploy, a lost host), and the
    job has waited long enough. From the second crash on the job may be what kills its
    workers, so the retry waits the usual backoff, and `max_retries` still stops it."""
    plan = plan_retry(attempts, max_retries, retry_backoff, retry_backoff_max)
    if plan.decision is RetryDecision.RETRY:
        return JobStatus.QUEUED, 0.0 if crashes <= 1 else plan.delay, None
    summary = f"{crash.get('reason', 'crashed')} on worker {crash.get('worker_id')}"
    return JobStatus.DEAD, 0.0, dead_reason(Outcome.CRASHED, attempts, summary, crashes=crashes)
